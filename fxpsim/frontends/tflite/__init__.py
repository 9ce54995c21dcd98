"""``.tflite`` models: the flatbuffer reader (:mod:`.reader`), the importer (:mod:`.importer`,
:func:`import_tflite`), the shape folding of constant subgraphs (:mod:`.shape_ops`) and the graph ops with
LiteRT's integer semantics in each kernel set (:mod:`.ops`, on :mod:`fxpsim.datapath.tflite`)."""
