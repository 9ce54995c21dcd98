// dense_stream.v -- dense_pe (dense_pe.v) behind valid/ready streams: what fxpsim's cocotb bench
// (fxpsim.rtl.cocotb_bench) drives and checks.  Verilog-2005, synthesizable.
//
// Port convention (every stream <name>_data / <name>_valid / <name>_ready; a beat moves at a rising
// edge where valid and ready are both high; a source holds data and valid until the beat moves):
//
//   inputs (the bench is the source)        words              layout (C order, one element a beat)
//     w      weights                        M*K x  8 bits      [M][K]
//     bias   bias in the accumulator scale  M   x 32 bits      [M]    (sign-extended)
//     mult   quantized multiplier (Q31)     M   x 32 bits      [M]
//     shift  TFLite exponent                M   x  8 bits      [M]    (positive: left shift)
//     x      input vectors                  N*K x  8 bits      [N][K] (any N: one vector after another)
//   outputs (the bench is the sink)
//     y      y_data: int8 output, y_acc: the accumulator the requantizer saw (ACC_BITS bits),
//            one beat per (vector, channel) in [N][M] order
//     trace  trace_data: the running accumulator after every add (dense_pe's MAC trace tap),
//            K + 1 (BIAS_PRELOAD=0: K + 2) beats per (vector, channel); valid only, no ready: a tap
//            the sink must always take
//   scalars, held for the whole run: x_zp, out_zp, act_min, act_max (int8)
//
// The parameter streams fill internal memories (any order, interleaved or not); the first vector
// is computed once all of them are in and its K x beats arrived.  A vector's M results go into an
// M-deep FIFO, and the next vector starts only when that FIFO is empty, so y backpressure never
// stalls the engine.  Reset (rst, synchronous, active high) empties everything.
//
// Parameters K, M, ACC_BITS, SATURATE, BIAS_PRELOAD and the BUG_* defines: see dense_pe.v.
`timescale 1ns / 1ps

module dense_stream #(
    parameter integer K            = 64,
    parameter integer M            = 8,
    parameter integer ACC_BITS     = 32,
    parameter integer SATURATE     = 1,
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
    output wire                 trace_valid
);
    localparam integer KW = (K > 1) ? $clog2(K) : 1;
    localparam integer MW = (M > 1) ? $clog2(M) : 1;
    localparam integer WW = (K * M > 1) ? $clog2(K * M) : 1;
    localparam integer KC = $clog2(K + 1);          // counters 0 .. K, 0 .. M, 0 .. M*K
    localparam integer MC = $clog2(M + 1);
    localparam integer WC = $clog2(K * M + 1);
    localparam integer  W_I = K * M;
    localparam [KC-1:0] K_FULL = K[KC-1:0];
    localparam [MC-1:0] M_FULL = M[MC-1:0];
    localparam [WC-1:0] W_FULL = W_I[WC-1:0];
    localparam integer  M_LAST_I = M - 1;
    localparam [MW-1:0] M_LAST = M_LAST_I[MW-1:0];

    reg [7:0]  w_mem     [0:K*M-1];
    reg [31:0] bias_mem  [0:M-1];
    reg [31:0] mult_mem  [0:M-1];
    reg [7:0]  shift_mem [0:M-1];
    reg [7:0]  x_buf     [0:K-1];
    reg [WC-1:0] w_cnt;
    reg [MC-1:0] bias_cnt, mult_cnt, shift_cnt;
    reg [KC-1:0] x_cnt;
    reg          running;                       // a vector is in dense_pe

    assign w_ready     = (w_cnt != W_FULL);
    assign bias_ready  = (bias_cnt != M_FULL);
    assign mult_ready  = (mult_cnt != M_FULL);
    assign shift_ready = (shift_cnt != M_FULL);
    assign x_ready     = (x_cnt != K_FULL) && !running;
    wire params_in = !w_ready && !bias_ready && !mult_ready && !shift_ready;

    // output FIFO of M entries {acc, y}
    reg [ACC_BITS+7:0] fifo [0:M-1];
    reg [MW-1:0] wr_ptr, rd_ptr;
    reg [MC-1:0] count;
    assign y_valid = (count != {MC{1'b0}});
    assign y_data  = fifo[rd_ptr][7:0];
    assign y_acc   = fifo[rd_ptr][ACC_BITS+7:8];
    wire pop = y_valid && y_ready;

    wire start = params_in && (x_cnt == K_FULL) && !running && !y_valid;

    wire [KW-1:0] x_addr;
    wire [WW-1:0] w_addr;
    wire [MW-1:0] ch_addr;
    /* verilator lint_off UNUSEDSIGNAL */
    wire busy;
    /* verilator lint_on UNUSEDSIGNAL */
    wire pe_valid, pe_done;
    wire [MW-1:0] pe_ch;
    wire signed [ACC_BITS-1:0] pe_acc;
    wire signed [7:0] pe_y;
    dense_pe #(.K(K), .M(M), .ACC_BITS(ACC_BITS), .SATURATE(SATURATE), .BIAS_PRELOAD(BIAS_PRELOAD)) u_pe (
        .clk(clk), .rst(rst), .start(start),
        .x_zp(x_zp), .out_zp(out_zp), .act_min(act_min), .act_max(act_max),
        .x_addr(x_addr), .x_data(x_buf[x_addr]),
        .w_addr(w_addr), .w_data(w_mem[w_addr]),
        .ch_addr(ch_addr), .bias_data(bias_mem[ch_addr]), .mult_data(mult_mem[ch_addr]),
        .shift_data(shift_mem[ch_addr]),
        .busy(busy), .out_valid(pe_valid), .out_ch(pe_ch), .acc_out(pe_acc), .y_out(pe_y), .done(pe_done),
        .trace_valid(trace_valid), .trace_acc(trace_data)
    );

    always @(posedge clk) begin
        if (rst) begin
            w_cnt <= {WC{1'b0}};
            bias_cnt <= {MC{1'b0}};
            mult_cnt <= {MC{1'b0}};
            shift_cnt <= {MC{1'b0}};
            x_cnt <= {KC{1'b0}};
            running <= 1'b0;
            wr_ptr <= {MW{1'b0}};
            rd_ptr <= {MW{1'b0}};
            count <= {MC{1'b0}};
        end else begin
            if (w_valid && w_ready) begin
                w_mem[w_cnt[WW-1:0]] <= w_data;
                w_cnt <= w_cnt + 1'b1;
            end
            if (bias_valid && bias_ready) begin
                bias_mem[bias_cnt[MW-1:0]] <= bias_data;
                bias_cnt <= bias_cnt + 1'b1;
            end
            if (mult_valid && mult_ready) begin
                mult_mem[mult_cnt[MW-1:0]] <= mult_data;
                mult_cnt <= mult_cnt + 1'b1;
            end
            if (shift_valid && shift_ready) begin
                shift_mem[shift_cnt[MW-1:0]] <= shift_data;
                shift_cnt <= shift_cnt + 1'b1;
            end
            if (x_valid && x_ready) begin
                x_buf[x_cnt[KW-1:0]] <= x_data;
                x_cnt <= x_cnt + 1'b1;
            end
            if (start)
                running <= 1'b1;
            else if (pe_done) begin
                running <= 1'b0;
                x_cnt <= {KC{1'b0}};               // the buffer is free for the next vector
            end
            if (pe_valid) begin
                fifo[wr_ptr] <= {pe_acc, pe_y};
                wr_ptr <= (wr_ptr == M_LAST) ? {MW{1'b0}} : wr_ptr + 1'b1;
            end
            if (pop)
                rd_ptr <= (rd_ptr == M_LAST) ? {MW{1'b0}} : rd_ptr + 1'b1;
            if (pe_valid && !pop)
                count <= count + 1'b1;
            else if (pop && !pe_valid)
                count <= count - 1'b1;
        end
    end

    /* verilator lint_off UNUSEDSIGNAL */
    wire [MW-1:0] unused_ch = pe_ch;               // results arrive in channel order
    /* verilator lint_on UNUSEDSIGNAL */
endmodule
