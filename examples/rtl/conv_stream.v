// conv_stream.v -- int8 conv2d / depthwise conv2d engine behind valid/ready streams, bit-exact with
// fxpsim's conv2d and depthwise_conv2d nodes on a sequential accumulator (what fxpsim.rtl.export_vectors
// writes for them, and fxpsim.rtl.cocotb_bench drives and checks).  Verilog-2005, synthesizable.
//
// For every output element (n, oh, ow, m), in NHWC order (m fastest), one multiply-accumulate a clock:
//
//   acc = BIAS_PRELOAD ? fit(bias[m]) : 0
//   for each tap t = (i, j, c) (conv2d, row-major) or t = (i, j) (depthwise, c = m / DM):
//       ih = oh*SH + i*DH - PT,  iw = ow*SW + j*DW - PL
//       x' = (0 <= ih < H && 0 <= iw < W) ? x[n][ih][iw][c] - x_zp : 0     // a padded tap adds 0
//       acc = fit(acc + x' * w(m, t))                                        // overflow rule at EVERY add
//   if (!BIAS_PRELOAD) acc = fit(acc + bias[m])
//   y[n][oh][ow][m] = clamp(MultiplyByQuantizedMultiplier(acc, mult[m], shift[m]) + out_zp, act_min, act_max)
//
// w(m, t): conv2d weights OHWI, w[m][i][j][c] (word m*K + t); depthwise weights [1][KH][KW][C*DM],
// w[0][i][j][m] (word t*M + m).  K = KH*KW*C (conv2d) or KH*KW (depthwise) taps.  fit() keeps ACC_BITS
// bits, saturating (SATURATE=1) or wrapping; the requantizer is tflite_requant of dense_pe.v (compile
// both files).  Weight zero points are 0 (TFLite int8).
//
// Streams (<name>_data / _valid / _ready; a beat moves at a rising edge where valid and ready are high):
//   w      weights, M*K beats of 8 bits, in the layout above (C order of the weight tensor)
//   bias, mult, shift   M beats each (32, 32, 8 bits): bias in the accumulator scale, Q31 multiplier,
//          TFLite exponent (positive: left shift)
//   x      input images, H*W*C beats of 8 bits each (NHWC; any number of images, one after another)
//   y      y_data (int8 output) and y_acc (the accumulator the requantizer saw), one beat per output
//          element in [N][OH][OW][M] order, through a 4-deep FIFO (the engine waits when it is full)
//   trace  trace_data: the running accumulator after every update -- K + 1 (BIAS_PRELOAD=0: K + 2)
//          beats per output element, fxpsim's MAC trace columns; valid only: a tap the sink always takes
//   scalars, held: x_zp, out_zp, act_min, act_max (int8)
// An image is computed once every parameter word and its H*W*C input words are in; the next image's
// words are taken when it is done.  Reset (rst, synchronous, active high) empties everything.
//
// Bug-injection defines (for testing the verification flow; never define them otherwise):
//   BUG_WRAP_INSTEAD_OF_SAT   the accumulator always wraps, ignoring SATURATE
//   BUG_ACC_ONE_BIT_NARROW    the accumulator keeps ACC_BITS-1 bits
//   BUG_ROUND_HALF_UP         (tflite_requant, dense_pe.v) negative rounding ties go toward +inf
//   BUG_WEIGHTS_HWIO          conv2d weights read as HWIO, w[i][j][c][m] (word t*M + m): transposed
//   BUG_PAD_ZERO_CODE         a padded tap reads the code 0 instead of the zero point: adds -x_zp * w
`timescale 1ns / 1ps

module conv_stream #(
    parameter integer H = 8, parameter integer W = 8, parameter integer C = 8,   // input image
    parameter integer M = 8,                                                     // output channels
    parameter integer KH = 3, parameter integer KW = 3,                          // kernel
    parameter integer SH = 1, parameter integer SW = 1,                          // stride
    parameter integer DH = 1, parameter integer DW = 1,                          // dilation
    parameter integer PT = 0, parameter integer PL = 0,                          // top / left padding
    parameter integer OH = 6, parameter integer OW = 6,                          // output image
    parameter integer DEPTHWISE = 0,  // 1: depthwise, M = C * DM
    parameter integer DM = 1,         // depth multiplier (depthwise)
    parameter integer ACC_BITS = 32,  // 2 .. 32
    parameter integer SATURATE = 1,
    parameter integer BIAS_PRELOAD = 0
) (
    input  wire                 clk,
    input  wire                 rst,
    input  wire signed [7:0]    x_zp,
    input  wire signed [7:0]    out_zp,
    input  wire signed [7:0]    act_min,
    input  wire signed [7:0]    act_max,
    input  wire [7:0]           w_data,
    input  wire                 w_valid,
    output wire                 w_ready,
    input  wire [31:0]          bias_data,
    input  wire                 bias_valid,
    output wire                 bias_ready,
    input  wire [31:0]          mult_data,
    input  wire                 mult_valid,
    output wire                 mult_ready,
    input  wire [7:0]           shift_data,
    input  wire                 shift_valid,
    output wire                 shift_ready,
    input  wire [7:0]           x_data,
    input  wire                 x_valid,
    output wire                 x_ready,
    output wire [7:0]           y_data,
    output wire [ACC_BITS-1:0]  y_acc,
    output wire                 y_valid,
    input  wire                 y_ready,
    output wire [ACC_BITS-1:0]  trace_data,
    output reg                  trace_valid
);
    localparam integer K  = (DEPTHWISE != 0) ? KH * KW : KH * KW * C;
    localparam integer XN = H * W * C;
    localparam integer WN = M * K;

    generate
        if (ACC_BITS < 2 || ACC_BITS > 32) begin : check_acc_bits
            conv_stream_ACC_BITS_must_be_2_to_32 invalid_parameter();
        end
        if (DEPTHWISE != 0 && M != C * DM) begin : check_depthwise
            conv_stream_depthwise_M_must_be_C_times_DM invalid_parameter();
        end
    endgenerate

`ifdef BUG_ACC_ONE_BIT_NARROW
    localparam integer AB = ACC_BITS - 1;
`else
    localparam integer AB = ACC_BITS;
`endif
`ifdef BUG_WRAP_INSTEAD_OF_SAT
    localparam integer SAT = 0;
`else
    localparam integer SAT = SATURATE;
`endif
    localparam signed [39:0] ACC_MAX = (40'sd1 <<< (AB - 1)) - 40'sd1;
    localparam signed [39:0] ACC_MIN = -(40'sd1 <<< (AB - 1));

    function signed [39:0] fit;                    // the overflow rule on an exact 40-bit sum
        input signed [39:0] s;
        reg   signed [39:0] v;
        begin
            v = s <<< (40 - AB);
            v = v >>> (40 - AB);
            if (SAT != 0 && s > ACC_MAX)
                fit = ACC_MAX;
            else if (SAT != 0 && s < ACC_MIN)
                fit = ACC_MIN;
            else
                fit = v;
        end
    endfunction

    reg [7:0]  w_mem     [0:WN-1];
    reg [31:0] bias_mem  [0:M-1];
    reg [31:0] mult_mem  [0:M-1];
    reg [7:0]  shift_mem [0:M-1];
    reg [7:0]  x_mem     [0:XN-1];
    reg [31:0] w_cnt, bias_cnt, mult_cnt, shift_cnt, x_cnt;

    localparam [2:0] S_IDLE = 3'd0, S_INIT = 3'd1, S_MAC = 3'd2, S_BIAS = 3'd3, S_REQ = 3'd4;
    reg [2:0]         state;
    reg [31:0]        oh, ow, m, i, j, c, t;   // output element and tap counters
    reg signed [39:0] acc;

    assign w_ready     = (w_cnt != WN);
    assign bias_ready  = (bias_cnt != M);
    assign mult_ready  = (mult_cnt != M);
    assign shift_ready = (shift_cnt != M);
    assign x_ready     = (x_cnt != XN) && (state == S_IDLE);
    wire params_in = !w_ready && !bias_ready && !mult_ready && !shift_ready;

    // the current tap
    /* verilator lint_off UNUSEDSIGNAL */
    wire [31:0] cin   = (DEPTHWISE != 0) ? m / DM : c;
    wire signed [31:0] ih = $signed(oh * SH + i * DH) - PT;
    wire signed [31:0] iw = $signed(ow * SW + j * DW) - PL;
    wire in_image = (ih >= 0) && (ih < H) && (iw >= 0) && (iw < W);
    wire [31:0] x_idx = in_image ? ($unsigned(ih) * W + $unsigned(iw)) * C + cin : 32'd0;
`ifdef BUG_WEIGHTS_HWIO
    wire [31:0] w_idx = t * M + m;
`else
    wire [31:0] w_idx = (DEPTHWISE != 0) ? t * M + m : m * K + t;
`endif
    /* verilator lint_on UNUSEDSIGNAL */
    wire signed [7:0] x_code = x_mem[x_idx];
    wire signed [7:0] w_code = w_mem[w_idx];
`ifdef BUG_PAD_ZERO_CODE
    wire signed [8:0] x_off = in_image ? ({x_code[7], x_code} - {x_zp[7], x_zp}) : -{x_zp[7], x_zp};
`else
    wire signed [8:0] x_off = in_image ? ({x_code[7], x_code} - {x_zp[7], x_zp}) : 9'sd0;
`endif
    wire signed [16:0] prod   = x_off * w_code;
    wire signed [39:0] bias40 = {{8{bias_mem[m][31]}}, bias_mem[m]};
    wire signed [39:0] mac_sum  = acc + {{23{prod[16]}}, prod};
    wire signed [39:0] bias_sum = acc + bias40;
    assign trace_data = acc[ACC_BITS-1:0];

    /* verilator lint_off UNUSEDSIGNAL */
    wire signed [31:0] scaled;
    /* verilator lint_on UNUSEDSIGNAL */
    wire signed [7:0] y_next;
    tflite_requant u_rq (
        .acc(acc[31:0]), .mult(mult_mem[m]), .shift(shift_mem[m]),
        .out_zp(out_zp), .act_min(act_min), .act_max(act_max), .scaled(scaled), .y(y_next)
    );

    // output FIFO, 4 entries of {acc, y}
    reg [ACC_BITS+7:0] fifo [0:3];
    reg [1:0] wr_ptr, rd_ptr;
    reg [2:0] count;
    assign y_valid = (count != 3'd0);
    assign y_data  = fifo[rd_ptr][7:0];
    assign y_acc   = fifo[rd_ptr][ACC_BITS+7:8];
    wire pop  = y_valid && y_ready;
    wire push = (state == S_REQ) && (count != 3'd4);

    wire last_tap = (DEPTHWISE != 0) ? (i == KH - 1 && j == KW - 1)
                                     : (i == KH - 1 && j == KW - 1 && c == C - 1);

    always @(posedge clk) begin
        if (rst) begin
            w_cnt <= 32'd0; bias_cnt <= 32'd0; mult_cnt <= 32'd0; shift_cnt <= 32'd0; x_cnt <= 32'd0;
            state <= S_IDLE;
            oh <= 32'd0; ow <= 32'd0; m <= 32'd0; i <= 32'd0; j <= 32'd0; c <= 32'd0; t <= 32'd0;
            acc <= 40'sd0;
            trace_valid <= 1'b0;
            wr_ptr <= 2'd0; rd_ptr <= 2'd0; count <= 3'd0;
        end else begin
            if (w_valid && w_ready) begin
                w_mem[w_cnt] <= w_data;
                w_cnt <= w_cnt + 32'd1;
            end
            if (bias_valid && bias_ready) begin
                bias_mem[bias_cnt] <= bias_data;
                bias_cnt <= bias_cnt + 32'd1;
            end
            if (mult_valid && mult_ready) begin
                mult_mem[mult_cnt] <= mult_data;
                mult_cnt <= mult_cnt + 32'd1;
            end
            if (shift_valid && shift_ready) begin
                shift_mem[shift_cnt] <= shift_data;
                shift_cnt <= shift_cnt + 32'd1;
            end
            if (x_valid && x_ready) begin
                x_mem[x_cnt] <= x_data;
                x_cnt <= x_cnt + 32'd1;
            end
            trace_valid <= (state == S_INIT) || (state == S_MAC) || (state == S_BIAS);
            case (state)
                S_IDLE: if (params_in && x_cnt == XN) begin
                    oh <= 32'd0; ow <= 32'd0; m <= 32'd0;
                    state <= S_INIT;
                end
                S_INIT: begin
                    acc <= (BIAS_PRELOAD != 0) ? fit(bias40) : 40'sd0;
                    i <= 32'd0; j <= 32'd0; c <= 32'd0; t <= 32'd0;
                    state <= S_MAC;
                end
                S_MAC: begin
                    acc <= fit(mac_sum);
                    t <= t + 32'd1;
                    if (last_tap)
                        state <= (BIAS_PRELOAD != 0) ? S_REQ : S_BIAS;
                    else if (DEPTHWISE == 0 && c != C - 1)
                        c <= c + 32'd1;
                    else begin
                        c <= 32'd0;
                        if (j != KW - 1)
                            j <= j + 32'd1;
                        else begin
                            j <= 32'd0;
                            i <= i + 32'd1;
                        end
                    end
                end
                S_BIAS: begin
                    acc <= fit(bias_sum);
                    state <= S_REQ;
                end
                S_REQ: if (push) begin
                    state <= S_INIT;
                    if (m != M - 1)
                        m <= m + 32'd1;
                    else begin
                        m <= 32'd0;
                        if (ow != OW - 1)
                            ow <= ow + 32'd1;
                        else begin
                            ow <= 32'd0;
                            if (oh != OH - 1)
                                oh <= oh + 32'd1;
                            else begin
                                oh <= 32'd0;
                                x_cnt <= 32'd0;        // the image buffer is free for the next one
                                state <= S_IDLE;
                            end
                        end
                    end
                end
                default: state <= S_IDLE;
            endcase
            if (push) begin
                fifo[wr_ptr] <= {acc[ACC_BITS-1:0], y_next};
                wr_ptr <= wr_ptr + 2'd1;
            end
            if (pop)
                rd_ptr <= rd_ptr + 2'd1;
            if (push && !pop)
                count <= count + 3'd1;
            else if (pop && !push)
                count <= count - 3'd1;
        end
    end
endmodule
