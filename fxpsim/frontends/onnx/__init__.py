"""``.onnx`` models: the importer (:mod:`.importer`, :func:`import_onnx`) with its QDQ (:mod:`.qdq`) and
QOperator (:mod:`.qoperator`) conversions on the parsed nodes (:mod:`.nodes`), and the graph ops with
onnxruntime's CPU semantics (:mod:`.ops`, on :mod:`fxpsim.datapath.onnxruntime`)."""
