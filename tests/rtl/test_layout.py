"""fxpsim.rtl.layout.Layout: files written in any order / tiling / packing / endianness / address read back to the
same tensor, word for word what an independent model of the layout says (nested loops over the memory axes, lanes
packed as bit strings), what Icarus Verilog's $readmemh loads, and malformed files rejected naming file and line."""
from __future__ import annotations

import itertools
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fxpsim.rtl.layout import Layout


# ----------------------------------------------------------------------------------------- independent model
def model_words(codes, axes, tiles, order, pack, endian, bits, pad):
    """The words of ``codes`` in a layout, from its definition: nested loops over the memory axes (slowest
    first), tiled coordinate = tile * size + inner, lanes concatenated as binary strings."""
    shape = codes.shape
    size = dict(zip(axes, shape))
    if not order:
        order = [f"{a}_tile" for a in axes if a in tiles] + list(axes)
    ranges = []
    for name in order:
        if name.endswith("_tile") and name[:-5] in tiles:
            ranges.append(range((size[name[:-5]] + tiles[name[:-5]] - 1) // tiles[name[:-5]]))
        else:
            ranges.append(range(tiles.get(name, size[name])))
    values = []
    for combo in itertools.product(*ranges):
        at = dict(zip(order, combo))
        coord = []
        for a in axes:
            c = at[a] + (at[f"{a}_tile"] * tiles[a] if a in tiles else 0)
            coord.append(c)
        inside = all(c < n for c, n in zip(coord, shape))
        values.append(int(codes[tuple(coord)]) if inside else pad)
    while len(values) % pack:
        values.append(pad)
    words = []
    for i in range(0, len(values), pack):
        lanes = [format(v % (1 << bits), f"0{bits}b") for v in values[i:i + pack]]
        text = "".join(lanes) if endian == "big" else "".join(reversed(lanes))
        words.append(int(text, 2))
    return words


@st.composite
def layouts(draw):
    ndim = draw(st.integers(1, 3))
    axes = ("n", "h", "c")[-ndim:] if ndim < 3 else ("n", "h", "c")
    shape = tuple(draw(st.integers(1, 5)) for _ in axes)
    tiled = draw(st.lists(st.sampled_from(axes), unique=True, max_size=2))
    tiles = {a: draw(st.integers(1, 4)) for a in tiled}
    names = [f"{a}_tile" for a in axes if a in tiles] + list(axes)
    order = tuple(draw(st.permutations(names))) if draw(st.booleans()) else ()
    bits = draw(st.integers(1, 12))
    signed = draw(st.booleans())
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    codes = np.array(draw(st.lists(st.integers(lo, hi), min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                     dtype=np.int64).reshape(shape)
    lay = Layout(order=order, tiles=tiles, pack=draw(st.integers(1, 4)),
                 endian=draw(st.sampled_from(["little", "big"])),
                 radix=draw(st.sampled_from([16, 2])), per_line=draw(st.integers(1, 3)),
                 address=draw(st.none() | st.integers(0, 300)), pad=draw(st.integers(lo, hi)))
    return lay, codes, axes, bits, signed


def _word_lines(path):
    return [ln for ln in open(path).read().splitlines() if ln and not ln.startswith(("//", "@"))]


@settings(deadline=None)
@given(layouts())
def test_write_is_the_model_and_read_inverts_it(tmp_path_factory, case):
    lay, codes, axes, bits, signed = case
    path = tmp_path_factory.mktemp("lay") / "t.hex"
    lay.write(path, codes, bits, signed, axes=axes)
    want = model_words(codes, axes, dict(lay.tiles), lay.order, lay.pack, lay.endian, bits, lay.pad)
    wb = lay.pack * bits
    fmt = f"0{-(-wb // 4)}x" if lay.radix == 16 else f"0{wb}b"
    text = [format(w, fmt) for w in want]
    assert _word_lines(path) == [" ".join(text[i:i + lay.per_line]) for i in range(0, len(text), lay.per_line)]
    lines = open(path).read().splitlines()
    assert [ln for ln in lines if ln.startswith("@")] == ([] if lay.address is None else [f"@{lay.address:x}"])
    back = lay.read(path, codes.shape, bits, signed, axes=axes)
    assert back.dtype == np.int64 and np.array_equal(back, codes)
    assert lay.words(codes, bits, signed, axes) == want
    assert np.array_equal(lay.unwords(want, codes.shape, bits, signed, axes), codes)
    assert Layout.parse(str(lay)) == lay


def test_named_layouts_by_hand():
    """The layouts engineers ask for, checked against words written out by hand."""
    x = np.arange(2 * 3, dtype=np.int64).reshape(2, 3) - 2          # [[-2, -1, 0], [1, 2, 3]]
    assert Layout(pack=4).words(x, 8, True, ("n", "c")) == [0x0100fffe, 0x00000302]
    assert Layout(pack=4, endian="big").words(x, 8, True, ("n", "c")) == [0xfeff0001, 0x02030000]
    assert Layout(order=("c", "n")).words(x, 8, True, ("n", "c")) == [0xfe, 0x01, 0xff, 0x02, 0x00, 0x03]
    # 2-channel blocks of channels (c_tile, n, c): block 0 = channels 0, 1; block 1 = channel 2 + a pad
    assert Layout(tiles={"c": 2}).words(x, 8, True, ("n", "c")) == [0xfe, 0xff, 0x01, 0x02, 0x00, 0x00, 0x03, 0x00]


def test_hand_written_readmemh_with_addresses_and_several_words_a_line(tmp_path):
    p = tmp_path / "m.hex"
    p.write_text("// a hand-made file\n@12 0304  0506 // two words\n@10\n0102\n  @11 ffff\n")
    got = Layout(pack=2, address=0x10).read(p, (8,), 8, True)
    assert got.tolist() == [2, 1, -1, -1, 4, 3, 6, 5]


def test_big_words_and_64_bit_lanes(tmp_path):
    x = np.array([[-1, 1], [2 ** 62, -2 ** 63]], dtype=np.int64)
    lay = Layout(pack=2, endian="big")
    p = lay.write(tmp_path / "w.hex", x, 64, True)
    assert _word_lines(p)[0] == "ffffffffffffffff0000000000000001"
    assert np.array_equal(lay.read(p, (2, 2), 64, True), x)


# ----------------------------------------------------------------------------------------- malformed input
@pytest.mark.parametrize("body, message", [
    ("0102\n01g2\n", "line 2: malformed word '01g2'"),
    ("0102\n102\n", "line 2: '102' has 3 digits"),
    ("0102\n01x2\n", "undefined value at line 2"),
    ("0102\n0304\n0506\n", "line 3: word at address 0x2, outside"),
    ("@1\n0102\n@1 0304\n", "line 3: address 0x1 written twice (first at line 2)"),
    ("0102\n", "1 of the tensor's 2 words present; none at address 0x1"),
    ("0102 /* c */ 0304\n", "line 1: /* */ comments are not supported"),
    ("@zz\n0102\n0304\n", "line 1: malformed address '@zz'"),
])
def test_malformed_files_name_file_and_line(tmp_path, body, message):
    p = tmp_path / "bad.hex"
    p.write_text(body)
    with pytest.raises(ValueError) as exc:
        Layout(pack=2).read(p, (2, 2), 8, True)
    assert str(p) in str(exc.value) and message in str(exc.value)


def test_the_header_must_describe_the_readers_layout(tmp_path):
    x = np.arange(8, dtype=np.int64).reshape(2, 4)
    p = Layout(pack=4, endian="big").write(tmp_path / "h.hex", x, 8, True)
    with pytest.raises(ValueError, match=r"h\.hex, line 6: the file states layout 'pack=4 endian=big radix=16'"):
        Layout(pack=4).read(p, (2, 4), 8, True)
    with pytest.raises(ValueError, match=r"line 4: the file states bits '8'; the reader expects '4'"):
        Layout(pack=4, endian="big").read(p, (2, 4), 4, True)
    with pytest.raises(ValueError, match=r"line 2: the file states shape"):
        Layout(pack=4, endian="big").read(p, (4, 2), 8, True)
    p2 = tmp_path / "u.hex"
    p2.write_bytes(b"01\n\xff\n")
    with pytest.raises(ValueError, match=r"u\.hex, line 2: not an ASCII"):
        Layout().read(p2, (2,), 8, True)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(pack=0), ValueError, "pack must be >= 1"),
    (dict(pack=2.0), TypeError, "pack must be an int"),
    (dict(endian="middle"), ValueError, "endian must be 'little' or 'big'"),
    (dict(radix=10), ValueError, "radix must be 16"),
    (dict(order=("n", "n")), ValueError, "names an axis twice"),
    (dict(tiles={"c": 0}), ValueError, "tile of axis 'c' must be >= 1"),
    (dict(tiles=[3]), TypeError, "tiles must map axis names"),
    (dict(address=-1), ValueError, "address must be >= 0"),
])
def test_bad_layouts(kwargs, error, message):
    with pytest.raises(error, match=message):
        Layout(**kwargs)


def test_layout_and_tensor_must_agree():
    x = np.zeros((2, 3), np.int64)
    with pytest.raises(ValueError, match=r"tiles name axis 'w'; the tensor's axes are \('n', 'c'\)"):
        Layout(tiles={"w": 2}).words(x, 8, True, ("n", "c"))
    with pytest.raises(ValueError, match=r"must list each of \('c_tile', 'n', 'c'\) once \(missing \['c_tile'\]\)"):
        Layout(order=("n", "c"), tiles={"c": 2}).words(x, 8, True, ("n", "c"))
    with pytest.raises(ValueError, match="does not fit the 4-bit signed range"):
        Layout().words(np.array([8]), 4, True)
    with pytest.raises(ValueError, match="Layout pad"):
        Layout(pad=300).words(np.array([1]), 8, True)
    with pytest.raises(ValueError, match="must name each of the tensor's 2 axes once"):
        Layout().words(x, 8, True, ("n",))
    with pytest.raises(ValueError, match="3 words for a tensor of shape"):
        Layout(pack=4).unwords([0, 0, 0], (2, 3), 8, True)
    with pytest.raises(ValueError, match="Layout.parse: 'bogus=1'"):
        Layout.parse("pack=2 bogus=1")
    codes = x.copy()
    Layout(order=("c", "n")).words(codes, 8, True, ("n", "c"))
    assert np.array_equal(codes, x)                                   # the input is not touched


# ----------------------------------------------------------------------------------------- live: Icarus $readmemh
@pytest.mark.skipif(shutil.which("iverilog") is None or shutil.which("vvp") is None,
                    reason="iverilog not installed (apt-get install iverilog)")
@pytest.mark.parametrize("lay", [Layout(pack=4, per_line=3, address=5), Layout(pack=3, endian="big", radix=2),
                                 Layout(tiles={"c": 4}, order=("c_tile", "c", "n"), pack=2, address=0)])
def test_icarus_readmemh_loads_the_words_the_layout_describes(tmp_path, lay):
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (3, 6))
    p = lay.write(tmp_path / "t.mem", x, 8, True, axes=("n", "c"))
    want = lay.words(x, 8, True, ("n", "c"))
    base, wb = lay.address or 0, lay.pack * 8
    tb = tmp_path / "tb.v"
    tb.write_text(f"""module tb; reg [{wb - 1}:0] mem [0:{base + len(want) - 1}]; integer i;
initial begin $read{'memh' if lay.radix == 16 else 'memb'}("{p}", mem);
for (i = {base}; i < {base + len(want)}; i = i + 1) $display("W %h", mem[i]); $finish; end endmodule
""")
    subprocess.run(["iverilog", "-g2012", "-o", str(tmp_path / "tb.vvp"), str(tb)], check=True, capture_output=True)
    out = subprocess.run(["vvp", "-n", str(tmp_path / "tb.vvp")], capture_output=True, text=True, check=True).stdout
    assert [int(ln[2:], 16) for ln in out.splitlines() if ln.startswith("W ")] == want
