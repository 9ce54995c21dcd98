"""RTL verification: golden vectors of every node for a testbench (:mod:`.vectors`, :func:`export_vectors`),
``$readmemh``/``$readmemb`` and CSV files (:mod:`.memfile`), SystemVerilog headers (:mod:`.svh`), the
reference MAC model (:mod:`.mac_model`), and the comparison of an RTL dump with the golden vectors with
its first-mismatch locator and diagnosis (:mod:`.compare`, :mod:`.golden`, :mod:`.mismatch`,
:mod:`.compare_results`), memory layouts (order, tiles, packing, endianness, addresses: :mod:`.layout`), a
node's vectors as valid/ready streams checked word by word (:mod:`.scoreboard`) and the cocotb driver on top
(:mod:`.cocotb_bench`, imported on demand: cocotb is optional), and VCD waveform dumps read back (:mod:`.vcd`).
"""
from .memfile import read_csv_codes, read_mem, read_mem_header, write_csv_codes, write_mem
from .vectors import export_vectors
from .compare import compare, compare_arrays
from .layout import Layout
from .vcd import read_vcd

__all__ = ["export_vectors", "compare", "compare_arrays", "Layout", "write_mem", "read_mem", "read_mem_header",
           "write_csv_codes", "read_csv_codes", "read_vcd"]
