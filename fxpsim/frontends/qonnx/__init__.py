"""QONNX models (Brevitas, QKeras, HAWQ, FINN exports): the reader (:mod:`.reader`), the importer
(:mod:`.importer`, :func:`import_qonnx`) with its node conversions (:mod:`.convert`, :mod:`.convert_std`), and the
graph ops with exact QONNX semantics (:mod:`.ops`, on :mod:`fxpsim.datapath.qonnx`)."""
