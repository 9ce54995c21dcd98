"""fxpsim.rtl.memfile: $readmemh / $readmemb files and CSV, against an independent formatter."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fxpsim
from fxpsim.rtl import read_csv_codes, read_mem, read_mem_header, write_csv_codes, write_mem


def reference_word(v: int, bits: int, radix: int) -> str:
    """Independent formatter: the two's-complement code of ``v`` in ``bits`` bits."""
    mask = (1 << bits) - 1
    if radix == 16:
        return format(v & mask, "x").rjust((bits + 3) // 4, "0")
    return format(v & mask, "b").rjust(bits, "0")


def data_lines(path) -> list:
    return [s for s in open(path).read().split("\n") if s and not s.startswith("//")]


@st.composite
def words(draw):
    bits = draw(st.integers(1, 64))
    signed = draw(st.booleans())
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    edges = st.sampled_from(sorted({lo, hi, 0 if lo <= 0 else lo, min(max(-1, lo), hi), min(1, hi)}))
    values = draw(st.lists(st.one_of(st.integers(lo, hi), edges), min_size=0, max_size=40))
    return bits, signed, values


@given(words(), st.sampled_from([16, 2]), st.booleans())
def test_round_trip_matches_independent_formatter(tmp_path_factory, case, radix, header):
    bits, signed, values = case
    path = tmp_path_factory.mktemp("mem") / "v.mem"
    dtype = np.uint64 if (not signed and bits == 64) else np.int64
    write_mem(path, np.array(values, dtype=dtype), bits, signed, radix=radix, header=header)
    assert data_lines(path) == [reference_word(v, bits, radix) for v in values]
    back = read_mem(path, bits, signed, radix=radix)
    assert back.dtype == dtype
    assert back.tolist() == values
    # Python ints (object arrays) write the same file
    path2 = path.with_name("v2.mem")
    write_mem(path2, values, bits, signed, radix=radix, header=header)
    assert path2.read_text() == path.read_text()


@given(words())
def test_reader_accepts_upper_case_crlf_and_comments(tmp_path_factory, case):
    bits, signed, values = case
    path = tmp_path_factory.mktemp("mem") / "v.hex"
    body = "".join(f"{reference_word(v, bits, 16).upper()}  // word {i}\r\n\r\n" for i, v in enumerate(values))
    path.write_bytes(("// from elsewhere\r\n" + body).encode())
    assert read_mem(path, bits, signed).tolist() == values


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64])
def test_numpy_dtypes_and_shape(tmp_path, dtype):
    info = np.iinfo(dtype)
    codes = np.array([[info.min, -1 if info.min < 0 else 0, 0], [1, 5, info.max]], dtype=dtype)
    bits, signed = info.bits, info.min < 0
    path = write_mem(tmp_path / "a.hex", codes, bits, signed, layout="[R][C]")
    back = read_mem(path, bits, signed, shape=(2, 3))
    np.testing.assert_array_equal(back, codes.astype(np.int64))
    assert read_mem_header(path) == {"shape": (2, 3), "layout": "[R][C]", "bits": bits, "signed": signed,
                                     "radix": 16, "words": 6}


def test_exact_text(tmp_path):
    path = write_mem(tmp_path / "w.hex", np.array([[-1, 5], [3, -2048]]), 12, True, header="weights, 2 x 2")
    assert open(path).read() == (
        "// fxpsim memfile\n// shape: (2, 2)\n// layout: row-major (C order, last index fastest)\n"
        "// bits: 12\n// signed: yes\n// radix: 16\n// words: 4\n// weights, 2 x 2\n"
        "fff\n005\n003\n800\n")
    write_mem(tmp_path / "b.mem", [1, -1, 0], 3, True, radix=2, header=False)
    assert (tmp_path / "b.mem").read_text() == "001\n111\n000\n"
    write_mem(tmp_path / "c.hex", np.array([5], np.uint16), 9, False, header=False)
    assert (tmp_path / "c.hex").read_text() == "005\n"


def test_top_level_reexport():
    assert fxpsim.write_mem is write_mem and fxpsim.read_mem is read_mem


# --------------------------------------------------------------------------- write errors
@pytest.mark.parametrize("codes, bits, signed, where", [
    (np.array([[1, 2], [200, 3]]), 8, True, "codes[1, 0] = 200"),
    (np.array([0, -1, 7]), 3, False, "codes[1] = -1"),
    ([0, 1 << 64], 64, False, "codes[1] = 18446744073709551616"),
    (np.array([-129, 5], np.int16), 8, True, "codes[0] = -129"),
    (np.array(9), 4, True, "codes = 9"),
])
def test_write_names_first_misfit(tmp_path, codes, bits, signed, where):
    path = tmp_path / "bad.hex"
    with pytest.raises(ValueError, match=r"\A" + where.replace("[", r"\[") + " does not fit the"):
        write_mem(path, codes, bits, signed)
    assert not path.exists()


@pytest.mark.parametrize("kwargs, exc", [
    (dict(codes=np.array([1.0]), bits=8, signed=True), TypeError),
    (dict(codes=np.array([True]), bits=8, signed=True), TypeError),
    (dict(codes=[1, "2"], bits=8, signed=True), TypeError),
    (dict(codes=[1], bits=0, signed=True), ValueError),
    (dict(codes=[1], bits=65, signed=True), ValueError),
    (dict(codes=[1], bits=8.0, signed=True), TypeError),
    (dict(codes=[1], bits=8, signed=1), TypeError),
    (dict(codes=[1], bits=8, signed=True, radix=8), ValueError),
])
def test_write_argument_errors(tmp_path, kwargs, exc):
    with pytest.raises(exc):
        write_mem(tmp_path / "x.hex", **kwargs)


# --------------------------------------------------------------------------- malformed files
@pytest.mark.parametrize("body, bits, message", [
    ("0f\n0ff\n", 8, r"line 2: '0ff' has 3 digits; a 8-bit word takes exactly 2 hexadecimal digits"),
    ("f\n", 8, r"line 1: 'f' has 1 digits"),
    ("// c\n\n1ff\n3ff\n", 9, r"line 4: '3ff' = 1023 does not fit in 9 bits"),
    ("00\ng1\n", 8, r"line 2: malformed word 'g1': not a hexadecimal number"),
    ("0x1f\n", 8, r"line 1: malformed word '0x1f'"),
    ("-1\n", 8, r"line 1: malformed word '-1'"),
    ("0_f\n", 8, r"line 1: malformed word '0_f'"),
    ("00\n01 02\n", 8, r"line 2: 2 words on one line"),
    ("@10\n00\n", 8, r"line 1: address line '@10': @address lines are not supported"),
    ("00 /* c */\n", 8, r"line 1: /\* \*/ comments are not supported"),
    ("00\n01\nxx\n", 8, r"undefined value at line 3: 'xx'"),
    ("0000\n1z0X\n", 16, r"undefined value at line 2: '1z0X'"),
    ("0000\n1Z00\n", 16, r"undefined value at line 2"),
])
def test_malformed_hex_files(tmp_path, body, bits, message):
    path = tmp_path / "bad.hex"
    path.write_text(body)
    with pytest.raises(ValueError, match=message) as info:
        read_mem(path, bits, True)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("body, bits, message", [
    ("0101\n011\n", 4, r"line 2: '011' has 3 digits; a 4-bit word takes exactly 4 binary digits"),
    ("0102\n", 4, r"line 1: malformed word '0102': not a binary number"),
    ("01x1\n", 4, r"undefined value at line 1"),
])
def test_malformed_bin_files(tmp_path, body, bits, message):
    path = tmp_path / "bad.mem"
    path.write_text(body)
    with pytest.raises(ValueError, match=message):
        read_mem(path, bits, False, radix=2)


def test_header_checks_and_shape(tmp_path):
    path = write_mem(tmp_path / "a.hex", np.arange(6).reshape(2, 3), 8, True)
    with pytest.raises(ValueError, match="header states bits: 8 but read_mem was called with bits=12"):
        read_mem(path, 12, True)
    with pytest.raises(ValueError, match="header states signed: True"):
        read_mem(path, 8, False)
    with pytest.raises(ValueError, match="header states radix: 16"):
        read_mem(path, 8, True, radix=2)
    with pytest.raises(ValueError, match=r"6 words do not fill shape \(4, 2\)"):
        read_mem(path, 8, True, shape=(4, 2))
    truncated = tmp_path / "t.hex"
    truncated.write_text(open(path).read().rsplit("\n", 2)[0] + "\n")
    with pytest.raises(ValueError, match="header states 6 words but the file holds 5"):
        read_mem(truncated, 8, True)
    # files without the fxpsim header are read with the caller's settings only
    plain = tmp_path / "p.hex"
    plain.write_text("// bits: 12\n7f\n80\n")
    assert read_mem(plain, 8, True).tolist() == [127, -128]
    assert read_mem(plain, 8, False).tolist() == [127, 128]
    assert read_mem_header(plain) == {}


def test_not_ascii(tmp_path):
    path = tmp_path / "u.hex"
    path.write_bytes(b"00\n\xc3\xa9\n")
    with pytest.raises(ValueError, match="line 2: not an ASCII text file"):
        read_mem(path, 8, True)


# --------------------------------------------------------------------------- CSV
@given(st.lists(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=3, max_size=3), min_size=1,
                max_size=10))
def test_csv_round_trip(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("csv") / "a.csv"
    arr = np.array(rows, dtype=np.int64)
    write_csv_codes(path, arr)
    assert [s for s in open(path).read().split("\n") if s and not s.startswith("#")] == \
        [",".join(str(v) for v in row) for row in rows]
    np.testing.assert_array_equal(read_csv_codes(path), arr)


def test_csv_1d_bits_and_errors(tmp_path):
    path = write_csv_codes(tmp_path / "v.csv", np.array([-3, 0, 7], np.int8), bits=4, signed=True,
                           header="vector")
    assert open(path).read() == "# fxpsim codes\n# shape: (3,)\n# vector\n-3\n0\n7\n"
    assert read_csv_codes(path, bits=4, shape=3).tolist() == [-3, 0, 7]
    with pytest.raises(ValueError, match=r"codes\[2\] = 7 does not fit the 3-bit signed range"):
        write_csv_codes(tmp_path / "w.csv", [-3, 0, 7], bits=3)
    with pytest.raises(ValueError, match="line 6: 7 does not fit the 3-bit signed range"):
        read_csv_codes(path, bits=3)
    (tmp_path / "r.csv").write_text("1,2\n3\n")
    with pytest.raises(ValueError, match="line 2: 1 values; the rows above have 2"):
        read_csv_codes(tmp_path / "r.csv")
    (tmp_path / "m.csv").write_text("1,2\n3,0x4\n")
    with pytest.raises(ValueError, match="line 2: malformed value '0x4'"):
        read_csv_codes(tmp_path / "m.csv")
    with pytest.raises(ValueError, match="1-D or 2-D"):
        write_csv_codes(tmp_path / "c.csv", np.zeros((2, 2, 2), int))
