"""The text summary of an :class:`~fxpsim.graph.ir.IntegerGraph` (``graph.summary()``): one row per node with
its op, shapes, types, output quantization, MACs per sample and worst-case accumulator bits, each column
defined under the table."""
from __future__ import annotations

from .._text import format_table


def graph_summary(graph) -> str:
    """The table of :meth:`IntegerGraph.summary`."""
    rows = []
    for i, n in enumerate(graph.nodes):
        acts = [graph.tensors[t] for t in n.inputs if t and not graph.tensors[t].is_constant]
        out = graph.tensors[n.outputs[0]]
        acc = graph.accumulator_bits_needed(n)
        rows.append([i, n.name, n.op, " ".join(str(list(t.shape)) for t in acts), str(list(out.shape)),
                     f"{','.join(t.type_name for t in acts)}->{out.type_name}", out.quant_text(),
                     graph.macs(n), "" if acc is None else acc])
    total = sum(graph.macs(n) for n in graph.nodes)
    head = (f"{graph.name}: {len(graph.nodes)} nodes, inputs "
            + ", ".join(f"{t} {graph.tensors[t].type_name}{list(graph.tensors[t].shape)}" for t in graph.inputs)
            + ", outputs "
            + ", ".join(f"{t} {graph.tensors[t].type_name}{list(graph.tensors[t].shape)}" for t in graph.outputs)
            + f", {total:,} MACs per sample")
    table = format_table(rows, ["#", "node", "op", "input shapes", "output shape", "types", "output quant",
                                "MACs", "acc bits"])
    notes = ("MACs: multiply-accumulates per sample. acc bits: the signed accumulator width that holds the "
             "worst case |bias| + sum |x - z_x| |w - z_w| over all inputs of the input types (no overflow "
             "possible at or above it). output quant: real = s (code - z).")
    return f"{head}\n{table}\n{notes}"
