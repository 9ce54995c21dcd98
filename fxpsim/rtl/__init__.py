"""RTL verification: golden vectors of every node for a testbench (:mod:`.vectors`, :func:`export_vectors`),
``$readmemh``/``$readmemb`` and CSV files (:mod:`.memfile`), SystemVerilog headers (:mod:`.svh`), the
reference MAC model (:mod:`.mac_model`), and the comparison of an RTL dump with the golden vectors with
its first-mismatch locator and diagnosis (:mod:`.compare`, :mod:`.golden`, :mod:`.mismatch`,
:mod:`.compare_results`).
"""
from .memfile import read_csv_codes, read_mem, read_mem_header, write_csv_codes, write_mem
from .vectors import export_vectors
from .compare import compare

__all__ = ["export_vectors", "compare", "write_mem", "read_mem", "read_mem_header", "write_csv_codes",
           "read_csv_codes"]
