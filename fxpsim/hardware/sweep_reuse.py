"""Which points of a sweep need no simulation of their own: the nodes provably exact at their width.

:func:`provably_exact` groups the points that differ only in their accumulator, proves with
:func:`~fxpsim.hardware.width_sweep.exact_widths` which nodes cannot overflow (every partial sum and the
bias fit), and says which points equal the widest point of their group outright, and, for the others, which nodes
may take the widest point's tensors and traces instead of running (those provably exact whose inputs are the
widest point's).
"""
from __future__ import annotations

from ..core.fixed import Overflow
from .simulation import convert

#: Fields that may differ between a point and the run it reuses (see ``sweep(skip_exact=...)``).
_ACC_FIELDS = ("name", "description", "accumulator_bits", "accumulator_overflow", "bias_bits", "tile_accumulator_bits")
#: Modules whose ops (but ``avg_pool2d`` and the TFLite-native MAC ops) never read the accumulator settings.
_ACC_FREE_MODULES = ("fxpsim.graph.ops", "fxpsim.graph.elementwise_ops", "fxpsim.graph.lut_ops",
                     "fxpsim.frontends.tflite.ops", "fxpsim.frontends.tflite.activation_ops",
                     "fxpsim.frontends.tflite.mac_ops")


def _symmetric(dp) -> int:
    """1 for a symmetric saturating accumulator, else 0: the bounds are two's-complement widths (a width ``b``
    holds every sum in :math:`[-2^{b-1}, 2^{b-1} - 1]`; a depthwise node's bound is the exact peak of its running
    sums, which may be :math:`-2^{b-1}`), and symmetric saturation counts :math:`-2^{b-1}` as an overflow: one
    bit more holds every such sum."""
    return int(Overflow.parse(dp.accumulator_overflow) is Overflow.SATURATE_SYMMETRIC)


def _node_needs(net, exact: dict) -> dict | None:
    """Per node that reads the accumulator settings, the width from which it is provably exact on the sweep's
    inputs: ``exact_widths`` for the core MAC nodes, the worst case of the type for the other accumulating
    ops (average pooling, importer-native MAC ops); ``None`` when some op may depend on the accumulator in a
    way no bound covers (e.g. an ONNX-native kernel that only runs on a 32-bit wrapping accumulator)."""
    from ..graph.mac_ops import MAC_OPS
    from ..graph.registry import find_op
    need = {}
    for idx, nd in enumerate(net.nodes):
        if nd.op in MAC_OPS:
            need[idx] = exact[nd.name]
            continue
        run = find_op(nd.op).run
        if run.__module__ in _ACC_FREE_MODULES and nd.op != "avg_pool2d" and run.__name__ != "_native_mac_run":
            continue
        bound = net.accumulator_bits_needed(nd) if nd.op == "avg_pool2d" or run.__name__ == "_native_mac_run" \
            else None
        if bound is None:
            return None
        need[idx] = bound
    return need


def provably_exact(graph, x, configs: list, is_graph: bool):
    """``(reuse, partial)``: ``reuse = {point index: (index of the point it reuses, its number of nodes)}`` for
    points equal to the widest accumulator of their group (same config but for :data:`_ACC_FIELDS`) at which
    every node that reads the accumulator is provably exact (and so is the widest point); ``partial = {point
    index: (index of that point, flags)}`` for the other members of such a group, ``flags[i]`` True when node
    ``i`` (graph order) is provably exact at that point: it reads no accumulator setting, or its width holds its
    exact_widths bound (one bit more under symmetric saturation) and its bias is stored as at the widest point.  Such a node, fed the widest point's
    tensors, gives that point's outputs and trace (:func:`fxpsim.hardware.sweeps._run_point` takes them)."""
    from .width_sweep import exact_widths
    groups: dict = {}
    for i, c in enumerate(configs):
        flat = c.to_flat_dict()
        key = repr(sorted((k, repr(v)) for k, v in flat.items() if k not in _ACC_FIELDS))
        groups.setdefault(key, []).append(i)
    reuse, partial = {}, {}
    for members in groups.values():
        if len(members) < 2:
            continue
        ref = max(members, key=lambda i: (configs[i].accumulator_bits, -i))
        rc = configs[ref]
        try:
            net = graph if is_graph else convert(graph, rc)
            need = _node_needs(net, exact_widths(net, x, rc))
        except Exception:               # the point itself fails: its own run reports why, nothing reused
            continue
        if need is None:
            continue
        clipped = any(int(v) for v in net.meta.get("bias_clipped", {}).values())

        def flags_of(c) -> list:
            """Per node (graph order): provably exact on ``c`` (see above)."""
            flags = [True] * len(net.nodes)
            for idx, bits in need.items():
                nd = net.nodes[idx]
                nc, nr = c.for_node(nd, idx), rc.for_node(nd, idx)
                if nc.tile_k or nc.zero_point != "subtract" or nc.accumulator_bits < bits + _symmetric(nc):
                    flags[idx] = False  # tiles / a folded bias: not what the bounds cover; or too narrow
                elif nc.bias_bits != nr.bias_bits and (clipped or nc.bias_bits < bits):
                    flags[idx] = False  # a bias register that could hold the bias differently
            return flags

        if not all(flags_of(rc)):          # (rc's bias registers are its own: only the width counts)
            continue
        for i in members:
            if i == ref:
                continue
            flags = flags_of(configs[i])
            if all(flags):
                reuse[i] = (ref, len(flags))
            else:
                partial[i] = (ref, flags)
    return reuse, partial
