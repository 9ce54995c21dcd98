// dense_pe.v -- int8 fully-connected (dense) layer engine, bit-exact with
// fxpsim.quantized_fully_connected(..., requant=Requantizer(kind="double"), order="sequential").
//
// Verilog-2005, synthesizable.  One multiply-accumulate per clock:
//
//   for each output channel o = 0 .. M-1:
//     acc = BIAS_PRELOAD ? fit(bias[o]) : 0
//     for k = 0 .. K-1:  acc = fit(acc + (x[k] - x_zp) * w[o][k])     // overflow rule at EVERY add
//     if (!BIAS_PRELOAD) acc = fit(acc + bias[o])                       // same overflow rule
//     y[o] = clamp(MultiplyByQuantizedMultiplier(acc, mult[o], shift[o]) + out_zp, act_min, act_max)
//
// fit() keeps ACC_BITS bits: SATURATE=1 clamps to [-2^(ACC_BITS-1), 2^(ACC_BITS-1)-1],
// SATURATE=0 wraps (two's complement).  The requantizer is TFLite's / gemmlowp's
// MultiplyByQuantizedMultiplier ("double" rounding), see module tflite_requant below.
//
// Memories live outside the engine and are read asynchronously (combinationally):
//   x_addr  -> x_data      input vector, x_addr = k
//   w_addr  -> w_data      weights, layout [M][K] row-major: w_addr = o*K + k
//   ch_addr -> bias_data, mult_data, shift_data   per output channel, ch_addr = o
//
// Handshake: pulse `start` for one clock while `busy` is low; the engine then emits M results,
// one `out_valid` clock per output channel (out_ch = o, acc_out, y_out), and pulses `done`
// together with the last one.  Latency K + 2 (BIAS_PRELOAD=0: K + 3) clocks per channel.
//
// MAC trace tap: `trace_valid` is high for one clock after every accumulator update, with
// `trace_acc` the new value: s_0 (the preloaded bias, or 0), then s_k after product k-1, then (BIAS_PRELOAD=0)
// the sum with the bias -- K + 1 (BIAS_PRELOAD=0: K + 2) values per output channel, the columns of
// fxpsim's MAC trace.  Leave both unconnected when not needed.
//
// Bug-injection defines (for testing the co-simulation flow; never define them otherwise):
//   BUG_WRAP_INSTEAD_OF_SAT     the accumulator always wraps, ignoring SATURATE
//   BUG_ROUND_HALF_UP           RoundingDivideByPOT drops the sign term of its threshold:
//                               negative ties round toward +inf instead of away from zero
//   BUG_ACC_ONE_BIT_NARROW      the accumulator keeps ACC_BITS-1 bits
//   BUG_SWAPPED_WEIGHT_LAYOUT   weights addressed as [K][M] (w_addr = k*M + o)
//   BUG_SRDHM_NO_SAT            SRDHM misses its INT32_MIN * INT32_MIN saturation
//   BUG_SRDHM_FLOOR             SRDHM divides by 2^31 with an arithmetic shift (floor) instead
//                               of truncating toward zero
`timescale 1ns / 1ps

module dense_pe #(
    parameter integer K            = 64,  // inputs per vector
    parameter integer M            = 8,   // output channels
    parameter integer ACC_BITS     = 32,  // accumulator width, 2 .. 32
    parameter integer SATURATE     = 1,   // 1: saturate at every add, 0: wrap
    parameter integer BIAS_PRELOAD = 0    // 1: accumulator starts at the bias, 0: bias added last
) (
    input  wire                        clk,
    input  wire                        rst,       // synchronous, active high
    input  wire                        start,
    input  wire signed [7:0]           x_zp,      // input zero point
    input  wire signed [7:0]           out_zp,    // output zero point
    input  wire signed [7:0]           act_min,   // activation clamp, act_min <= act_max
    input  wire signed [7:0]           act_max,
    output wire [((K > 1) ? $clog2(K) : 1) - 1:0]          x_addr,
    input  wire signed [7:0]           x_data,
    output wire [((K * M > 1) ? $clog2(K * M) : 1) - 1:0]  w_addr,
    input  wire signed [7:0]           w_data,
    output wire [((M > 1) ? $clog2(M) : 1) - 1:0]          ch_addr,
    input  wire signed [31:0]          bias_data,
    input  wire signed [31:0]          mult_data,
    input  wire signed [7:0]           shift_data, // TFLite exponent -31 .. 30 (positive: left shift)
    output wire                        busy,
    output reg                         out_valid,
    output reg  [((M > 1) ? $clog2(M) : 1) - 1:0]          out_ch,
    output reg  signed [ACC_BITS-1:0]  acc_out,    // the accumulator value the requantizer saw
    output reg  signed [7:0]           y_out,
    output reg                         done,
    output reg                         trace_valid,  // the accumulator was just updated
    output wire signed [ACC_BITS-1:0]  trace_acc     // its value
);
    localparam integer KW = (K > 1) ? $clog2(K) : 1;
    localparam integer MW = (M > 1) ? $clog2(M) : 1;
    localparam integer WW = (K * M > 1) ? $clog2(K * M) : 1;
    localparam integer  K_LAST_I = K - 1;
    localparam integer  M_LAST_I = M - 1;
    localparam [KW-1:0] K_LAST = K_LAST_I[KW-1:0];
    localparam [MW-1:0] M_LAST = M_LAST_I[MW-1:0];

    // Parameter checks: an out-of-range value instantiates a module that does not exist,
    // so elaboration fails with the name below.
    generate
        if (ACC_BITS < 2 || ACC_BITS > 32) begin : check_acc_bits
            dense_pe_ACC_BITS_must_be_2_to_32 invalid_parameter();
        end
        if (K < 1 || M < 1) begin : check_sizes
            dense_pe_K_and_M_must_be_positive invalid_parameter();
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
    // Sums are formed exactly in 40 bits (|acc| <= 2^31, |bias| <= 2^31, |product| < 2^15).
    localparam signed [39:0] ACC_MAX = (40'sd1 <<< (AB - 1)) - 40'sd1;
    localparam signed [39:0] ACC_MIN = -(40'sd1 <<< (AB - 1));

    // The overflow rule, applied to the exact sum after every add.
    function signed [39:0] fit;
        input signed [39:0] s;
        reg   signed [39:0] w;
        begin
            w = s <<< (40 - AB);
            w = w >>> (40 - AB);           // two's-complement wrap to AB bits, sign-extended
            if (SAT != 0 && s > ACC_MAX)
                fit = ACC_MAX;
            else if (SAT != 0 && s < ACC_MIN)
                fit = ACC_MIN;
            else
                fit = w;
        end
    endfunction

    localparam [2:0] S_IDLE = 3'd0, S_INIT = 3'd1, S_MAC = 3'd2, S_BIAS = 3'd3, S_REQ = 3'd4;
    reg [2:0]          state;
    reg [KW-1:0]       k;
    reg [MW-1:0]       o;
    reg signed [39:0]  acc;                // always holds a fitted (AB-bit) value, sign-extended

    assign busy      = (state != S_IDLE);
    assign trace_acc = acc[ACC_BITS-1:0];
    assign x_addr  = k;
    assign ch_addr = o;
    /* verilator lint_off UNUSEDSIGNAL */
    wire [31:0] k32 = {{(32 - KW){1'b0}}, k};
    wire [31:0] o32 = {{(32 - MW){1'b0}}, o};
`ifdef BUG_SWAPPED_WEIGHT_LAYOUT
    wire [31:0] w_index = k32 * M + o32;   // reads the weights as [K][M]
`else
    wire [31:0] w_index = o32 * K + k32;   // [M][K] row-major
`endif
    /* verilator lint_on UNUSEDSIGNAL */
    assign w_addr = w_index[WW-1:0];

    // (x - x_zp) is a 9-bit signed value; the product fits 17 bits.
    wire signed [8:0]  x_off    = {x_data[7], x_data} - {x_zp[7], x_zp};
    wire signed [16:0] prod     = x_off * w_data;
    wire signed [39:0] mac_sum  = acc + {{23{prod[16]}}, prod};
    wire signed [39:0] bias40   = {{8{bias_data[31]}}, bias_data};
    wire signed [39:0] bias_sum = acc + bias40;

    wire signed [31:0] acc32    = acc[31:0];   // the accumulator sign-extended to int32
    /* verilator lint_off UNUSEDSIGNAL */
    wire signed [31:0] scaled;             // MultiplyByQuantizedMultiplier result (for waveforms)
    /* verilator lint_on UNUSEDSIGNAL */
    wire signed [7:0]  y_next;
    tflite_requant u_rq (
        .acc(acc32), .mult(mult_data), .shift(shift_data),
        .out_zp(out_zp), .act_min(act_min), .act_max(act_max),
        .scaled(scaled), .y(y_next)
    );

    always @(posedge clk) begin
        if (rst) begin
            state     <= S_IDLE;
            k         <= {KW{1'b0}};
            o         <= {MW{1'b0}};
            acc       <= 40'sd0;
            out_valid <= 1'b0;
            out_ch    <= {MW{1'b0}};
            acc_out   <= {ACC_BITS{1'b0}};
            y_out     <= 8'sd0;
            done      <= 1'b0;
            trace_valid <= 1'b0;
        end else begin
            out_valid <= 1'b0;
            done      <= 1'b0;
            trace_valid <= (state == S_INIT) || (state == S_MAC) || (state == S_BIAS);
            case (state)
                S_IDLE: if (start) begin
                    o     <= {MW{1'b0}};
                    state <= S_INIT;
                end
                S_INIT: begin
                    acc   <= (BIAS_PRELOAD != 0) ? fit(bias40) : 40'sd0;
                    k     <= {KW{1'b0}};
                    state <= S_MAC;
                end
                S_MAC: begin
                    acc <= fit(mac_sum);
                    if (k == K_LAST)
                        state <= (BIAS_PRELOAD != 0) ? S_REQ : S_BIAS;
                    else
                        k <= k + 1'b1;
                end
                S_BIAS: begin
                    acc   <= fit(bias_sum);
                    state <= S_REQ;
                end
                S_REQ: begin
                    out_valid <= 1'b1;
                    out_ch    <= o;
                    acc_out   <= acc[ACC_BITS-1:0];
                    y_out     <= y_next;
                    if (o == M_LAST) begin
                        done  <= 1'b1;
                        state <= S_IDLE;
                    end else begin
                        o     <= o + 1'b1;
                        state <= S_INIT;
                    end
                end
                default: state <= S_IDLE;
            endcase
        end
    end
endmodule


/* verilator lint_off DECLFILENAME */
// TFLite MultiplyByQuantizedMultiplier (gemmlowp, "double" rounding), output zero point, clamp.
// Combinational.
//   a      = int32(acc << max(shift, 0))                      (wraps, as TFLite's int32 multiply)
//   srdhm  = (a == b == INT32_MIN) ? INT32_MAX
//            : trunc_toward_zero((a*b + nudge) / 2^31),  nudge = (a*b >= 0) ? 2^30 : 1 - 2^30
//   scaled = RoundingDivideByPOT(srdhm, max(-shift, 0)):
//            mask = 2^e - 1, rem = srdhm & mask, thr = (mask >> 1) + (srdhm < 0),
//            scaled = (srdhm >>> e) + (rem > thr)
//   y      = clamp(scaled + out_zp, act_min, act_max)          (exact, 34 bits)
module tflite_requant (
    input  wire signed [31:0] acc,
    input  wire signed [31:0] mult,
    input  wire signed [7:0]  shift,
    input  wire signed [7:0]  out_zp,
    input  wire signed [7:0]  act_min,
    input  wire signed [7:0]  act_max,
    output wire signed [31:0] scaled,
    output wire signed [7:0]  y
);
    wire               left_en = (shift > 8'sd0);
    /* verilator lint_off UNUSEDSIGNAL */
    wire        [7:0]  neg     = -shift;
    wire        [4:0]  left    = left_en ? shift[4:0] : 5'd0;    // 0 .. 30
    wire        [4:0]  right   = left_en ? 5'd0 : neg[4:0];      // 0 .. 31

    // SaturatingRoundingDoublingHighMul(a, mult)
    wire signed [31:0] a        = acc <<< left;                  // int32 wrap
    wire signed [63:0] a64      = {{32{a[31]}}, a};
    wire signed [63:0] b64      = {{32{mult[31]}}, mult};
    wire signed [63:0] ab       = a64 * b64;                     // |ab| <= 2^62: exact
    wire               sat      = (a == 32'sh8000_0000) && (mult == 32'sh8000_0000);
    wire signed [63:0] nudge    = (ab >= 64'sd0) ? 64'sd1073741824 : (64'sd1 - 64'sd1073741824);
    wire signed [63:0] t        = ab + nudge;
`ifdef BUG_SRDHM_FLOOR
    wire signed [63:0] q        = t >>> 31;                      // floor: wrong for negative t
`else
    // t / 2^31 truncated toward zero (C division): bias negative values by 2^31 - 1 before the
    // arithmetic (floor) shift.
    wire signed [63:0] q        = (t >= 64'sd0) ? (t >>> 31) : ((t + 64'sd2147483647) >>> 31);
`endif
`ifdef BUG_SRDHM_NO_SAT
    wire signed [31:0] srdhm    = q[31:0];
`else
    wire signed [31:0] srdhm    = sat ? 32'sh7fff_ffff : q[31:0];
`endif

    // RoundingDivideByPOT(srdhm, right): round half away from zero
    wire        [31:0] mask     = (32'd1 << right) - 32'd1;
    wire        [31:0] rem      = srdhm & mask;
`ifdef BUG_ROUND_HALF_UP
    wire        [31:0] thr      = mask >> 1;                     // ties always up (toward +inf)
`else
    wire        [31:0] thr      = (mask >> 1) + ((srdhm < 32'sd0) ? 32'd1 : 32'd0);
`endif
    assign scaled = (srdhm >>> right) + ((rem > thr) ? 32'sd1 : 32'sd0);

    // output zero point and activation clamp, exact
    wire signed [33:0] lo = {{26{act_min[7]}}, act_min};
    wire signed [33:0] hi = {{26{act_max[7]}}, act_max};
    wire signed [33:0] yz = {{2{scaled[31]}}, scaled} + {{26{out_zp[7]}}, out_zp};
    wire signed [33:0] yc = (yz < lo) ? lo : ((yz > hi) ? hi : yz);
    assign y = yc[7:0];
    /* verilator lint_on UNUSEDSIGNAL */
endmodule
