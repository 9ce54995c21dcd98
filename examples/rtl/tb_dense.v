// tb_dense.v -- testbench for dense_pe: reads $readmemh vectors, runs N input vectors and
// writes the accumulator and output of every (vector, channel) as $readmemh files.
// SystemVerilog subset accepted by Icarus Verilog (iverilog -g2012): `string` file names.
//
// Compile-time parameters (iverilog -Ptb_dense.NAME=value): K, M, N, ACC_BITS, SATURATE,
// BIAS_PRELOAD (see dense_pe.v).
// Run-time plusargs (vvp ... +NAME=value), all optional:
//   +DIR=<directory>   where the input files are read and the outputs written (default ".")
//   +X_ZP=<int>  +OUT_ZP=<int>  +ACT_MIN=<int>  +ACT_MAX=<int>   (defaults 0, 0, -128, 127)
//
// Inputs ($readmemh; one word per line, two's complement, `//` comments allowed):
//   x.hex      N*K words,  8 bits (2 hex digits), layout [N][K] row-major
//   w.hex      M*K words,  8 bits (2 hex digits), layout [M][K] row-major
//   bias.hex   M   words, 32 bits (8 hex digits)
//   mult.hex   M   words, 32 bits (8 hex digits), TFLite quantized multiplier
//   shift.hex  M   words,  8 bits (2 hex digits), TFLite exponent -31..30, positive = left shift
// Outputs (same format, with an fxpsim memfile comment header):
//   acc_out.hex  N*M words, ACC_BITS bits (ceil(ACC_BITS/4) hex digits), layout [N][M]
//   y_out.hex    N*M words,  8 bits (2 hex digits), layout [N][M]
`timescale 1ns / 1ps

module tb_dense;
    parameter integer K            = 64;
    parameter integer M            = 8;
    parameter integer N            = 16;
    parameter integer ACC_BITS     = 32;
    parameter integer SATURATE     = 1;
    parameter integer BIAS_PRELOAD = 0;

    localparam integer KW = (K > 1) ? $clog2(K) : 1;
    localparam integer MW = (M > 1) ? $clog2(M) : 1;
    localparam integer WW = (K * M > 1) ? $clog2(K * M) : 1;

    reg  [7:0]  x_mem     [0:N*K-1];
    reg  [7:0]  w_mem     [0:M*K-1];
    reg  [31:0] bias_mem  [0:M-1];
    reg  [31:0] mult_mem  [0:M-1];
    reg  [7:0]  shift_mem [0:M-1];

    reg clk = 1'b0;
    reg rst = 1'b1;
    reg start = 1'b0;
    integer n = 0;
    integer x_zp = 0, out_zp = 0, act_min = -128, act_max = 127;
    string dir;
    integer fd_acc, fd_y, fd_chk, n_out = 0, cycles = 0;

    wire [KW-1:0] x_addr;
    wire [WW-1:0] w_addr;
    wire [MW-1:0] ch_addr;
    wire busy, out_valid, done;
    wire [MW-1:0] out_ch;
    wire signed [ACC_BITS-1:0] acc_out;
    wire signed [7:0] y_out;

    dense_pe #(.K(K), .M(M), .ACC_BITS(ACC_BITS), .SATURATE(SATURATE), .BIAS_PRELOAD(BIAS_PRELOAD)) dut (
        .clk(clk), .rst(rst), .start(start),
        .x_zp(x_zp[7:0]), .out_zp(out_zp[7:0]), .act_min(act_min[7:0]), .act_max(act_max[7:0]),
        .x_addr(x_addr), .x_data(x_mem[n * K + x_addr]),
        .w_addr(w_addr), .w_data(w_mem[w_addr]),
        .ch_addr(ch_addr), .bias_data(bias_mem[ch_addr]), .mult_data(mult_mem[ch_addr]),
        .shift_data(shift_mem[ch_addr]),
        .busy(busy), .out_valid(out_valid), .out_ch(out_ch), .acc_out(acc_out), .y_out(y_out),
        .done(done), .trace_valid(), .trace_acc()
    );

    always #5 clk = ~clk;

    task check_file(input string name, output integer ok);
        begin
            fd_chk = $fopen({dir, "/", name}, "r");
            ok = (fd_chk != 0);
            if (ok) $fclose(fd_chk);
            else $display("tb_dense: ERROR: cannot open %s/%s", dir, name);
        end
    endtask

    task header(input integer fd, input string what, input integer bits, input string layout);
        begin
            $fdisplay(fd, "// fxpsim memfile");
            $fdisplay(fd, "// shape: (%0d, %0d)", N, M);
            $fdisplay(fd, "// layout: %s", layout);
            $fdisplay(fd, "// bits: %0d", bits);
            $fdisplay(fd, "// signed: yes");
            $fdisplay(fd, "// radix: 16");
            $fdisplay(fd, "// words: %0d", N * M);
            $fdisplay(fd, "// %s from tb_dense: K=%0d M=%0d N=%0d ACC_BITS=%0d SATURATE=%0d BIAS_PRELOAD=%0d",
                      what, K, M, N, ACC_BITS, SATURATE, BIAS_PRELOAD);
        end
    endtask

    // Results are registered by the engine at a rising edge; record them at the falling edge.
    always @(negedge clk) begin
        cycles = cycles + 1;
        if (out_valid) begin
            $fdisplay(fd_acc, "%h", acc_out);
            $fdisplay(fd_y, "%h", y_out);
            n_out = n_out + 1;
        end
    end

    integer ok, all_ok, limit;
    initial begin
        if (!$value$plusargs("DIR=%s", dir)) dir = ".";
        if ($value$plusargs("X_ZP=%d", x_zp)) ;
        if ($value$plusargs("OUT_ZP=%d", out_zp)) ;
        if ($value$plusargs("ACT_MIN=%d", act_min)) ;
        if ($value$plusargs("ACT_MAX=%d", act_max)) ;
        all_ok = 1;
        check_file("x.hex", ok);     all_ok = all_ok & ok;
        check_file("w.hex", ok);     all_ok = all_ok & ok;
        check_file("bias.hex", ok);  all_ok = all_ok & ok;
        check_file("mult.hex", ok);  all_ok = all_ok & ok;
        check_file("shift.hex", ok); all_ok = all_ok & ok;
        if (!all_ok) $fatal(1, "tb_dense: missing input files");
        if (x_zp < -128 || x_zp > 127 || out_zp < -128 || out_zp > 127 || act_min < -128 ||
            act_max > 127 || act_min > act_max)
            $fatal(1, "tb_dense: need int8 X_ZP, OUT_ZP and -128 <= ACT_MIN <= ACT_MAX <= 127");
        $readmemh({dir, "/x.hex"}, x_mem);
        $readmemh({dir, "/w.hex"}, w_mem);
        $readmemh({dir, "/bias.hex"}, bias_mem);
        $readmemh({dir, "/mult.hex"}, mult_mem);
        $readmemh({dir, "/shift.hex"}, shift_mem);
        fd_acc = $fopen({dir, "/acc_out.hex"}, "w");
        fd_y   = $fopen({dir, "/y_out.hex"}, "w");
        if (fd_acc == 0 || fd_y == 0) $fatal(1, "tb_dense: cannot write to %s", dir);
        header(fd_acc, "accumulator seen by the requantizer", ACC_BITS, "[N][M] row-major");
        header(fd_y, "int8 outputs", 8, "[N][M] row-major");

        limit = N * (M * (K + 4) + 4) + 100;
        repeat (3) @(negedge clk);
        rst = 1'b0;
        for (n = 0; n < N; n = n + 1) begin
            @(negedge clk) start = 1'b1;
            @(negedge clk) start = 1'b0;
            while (!done) begin
                @(negedge clk);
                if (cycles > limit) $fatal(1, "tb_dense: timeout at vector %0d", n);
            end
        end
        repeat (2) @(negedge clk);
        $fclose(fd_acc);
        $fclose(fd_y);
        if (n_out != N * M) $fatal(1, "tb_dense: %0d results, expected %0d", n_out, N * M);
        $display("tb_dense: %0d vectors x %0d channels written to %s (%0d cycles)", N, M, dir, cycles);
        $finish;
    end
endmodule
