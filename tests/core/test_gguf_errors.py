"""Bad GGUF input through the Python API: every corruption raises a GeistError subclass whose
message names the problem, and a valid model still loads afterwards (nothing global broke).

The valid model is a tiny llama (2 layers, d=64, random F32 weights, a byte-level BPE vocabulary)
written with gguf.GGUFWriter. Corruptions are byte patches at offsets found by walking the file
with the small independent GGUF reader below."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
import pytest

import geist
from geist.testing import gpt2_byte_chars

N_LAYER = 2
D_MODEL = 64
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = D_MODEL // N_HEAD
D_FFN = 128
N_CTX = 256

BAD_FORMAT = 4
UNSUPPORTED = 5


# ------------------------------------------------------------------------------------------------
# Building the valid model


def _vocab() -> tuple[list[str], list[int], list[str]]:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = ["h e", "l l", "Ġ t", "he ll", "o r"]
    merged = [m.replace(" ", "") for m in merges]
    tokens = specials + gpt2_byte_chars() + merged
    types = [int(gguf.TokenType.CONTROL)] * len(specials) + [int(gguf.TokenType.NORMAL)] * (
        len(tokens) - len(specials)
    )
    return tokens, types, merges


N_VOCAB = len(_vocab()[0])

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# key -> (value, value type, array element type or None): written in place of the key's value
Replacements = dict[str, tuple[object, gguf.GGUFValueType, gguf.GGUFValueType | None]]


def build_llama(path: Path, arch: str = "llama", skip_keys: frozenset[str] = frozenset(),
                replace: Replacements | None = None) -> bytes:
    """Writes a small random llama GGUF to `path` and returns its bytes. `skip_keys` names
    metadata keys to leave out (to test the model layer's checks); `replace` gives keys other
    values or types (a well-formed GGUF whose known keys are wrong)."""
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(str(path), arch)

    def want(key: str) -> bool:
        return key not in skip_keys

    w.add_name("geist-test-llama")
    w.add_file_type(0)  # all F32
    if want(f"{arch}.block_count"):
        w.add_block_count(N_LAYER)
    w.add_context_length(N_CTX)
    w.add_embedding_length(D_MODEL)
    w.add_feed_forward_length(D_FFN)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(N_VOCAB)
    w.add_rope_dimension_count(HEAD_DIM)
    tokens, types, merges = _vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    for key, (value, vtype, sub) in (replace or {}).items():
        w.add_key_value(key, value, vtype, sub)  # replaces the value, keeps the key's place

    def t(name: str, *shape: int, norm: bool = False) -> None:
        if norm:
            arr = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            arr = (0.05 * rng.standard_normal(shape)).astype(np.float32)
        w.add_tensor(name, arr)

    # numpy shapes are (rows, row length): the GGUF ne[] is the reverse.
    t("token_embd.weight", N_VOCAB, D_MODEL)
    for i in range(N_LAYER):
        t(f"blk.{i}.attn_norm.weight", D_MODEL, norm=True)
        t(f"blk.{i}.attn_q.weight", N_HEAD * HEAD_DIM, D_MODEL)
        t(f"blk.{i}.attn_k.weight", N_HEAD_KV * HEAD_DIM, D_MODEL)
        t(f"blk.{i}.attn_v.weight", N_HEAD_KV * HEAD_DIM, D_MODEL)
        t(f"blk.{i}.attn_output.weight", D_MODEL, N_HEAD * HEAD_DIM)
        t(f"blk.{i}.ffn_norm.weight", D_MODEL, norm=True)
        t(f"blk.{i}.ffn_gate.weight", D_FFN, D_MODEL)
        t(f"blk.{i}.ffn_up.weight", D_FFN, D_MODEL)
        t(f"blk.{i}.ffn_down.weight", D_MODEL, D_FFN)
    t("output_norm.weight", D_MODEL, norm=True)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


# ------------------------------------------------------------------------------------------------
# A small independent GGUF walker: where each field lies, for byte patches


_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_TYPE_BYTES = {0: (1, 4), 1: (1, 2), 8: (32, 34)}  # F32, F16, Q8_0: (block, bytes)


@dataclass
class KvPos:
    key: str
    key_len_at: int
    type_at: int
    value_at: int


@dataclass
class TensorPos:
    name: str
    name_len_at: int
    n_dims_at: int
    dims_at: int
    type_at: int
    offset_at: int
    ne: list[int]
    type: int
    offset: int

    @property
    def nbytes(self) -> int:
        block, size = _TYPE_BYTES[self.type]
        return int(np.prod(self.ne)) // block * size


@dataclass
class Layout:
    kvs: list[KvPos] = field(default_factory=list)
    tensors: list[TensorPos] = field(default_factory=list)
    tensor_info_at: int = 0
    data_offset: int = 0
    data_end: int = 0  # end of the last tensor's bytes (the file may pad after it)

    def kv(self, key: str) -> KvPos:
        return next(k for k in self.kvs if k.key == key)


def walk(data: bytes) -> Layout:
    pos = 0

    def u32() -> int:
        nonlocal pos
        (v,) = struct.unpack_from("<I", data, pos)
        pos += 4
        return int(v)

    def u64() -> int:
        nonlocal pos
        (v,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        return int(v)

    def string() -> str:
        nonlocal pos
        n = u64()
        s = data[pos : pos + n].decode("utf-8")
        pos += n
        return s

    def skip_value(vtype: int) -> None:
        nonlocal pos
        if vtype == _STRING:
            string()
        elif vtype == _ARRAY:
            etype, n = u32(), u64()
            for _ in range(n):
                skip_value(etype)
        else:
            pos += _SCALAR_SIZE[vtype]

    assert data[:4] == b"GGUF"
    pos = 8
    n_tensors, n_kv = u64(), u64()
    lay = Layout()
    alignment = 32
    for _ in range(n_kv):
        key_at = pos
        key = string()
        type_at = pos
        vtype = u32()
        value_at = pos
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", data, pos)[0]
        skip_value(vtype)
        lay.kvs.append(KvPos(key, key_at, type_at, value_at))
    lay.tensor_info_at = pos
    for _ in range(n_tensors):
        name_at = pos
        name = string()
        n_dims_at = pos
        n_dims = u32()
        dims_at = pos
        ne = [u64() for _ in range(n_dims)]
        type_at = pos
        ttype = u32()
        offset_at = pos
        offset = u64()
        lay.tensors.append(
            TensorPos(name, name_at, n_dims_at, dims_at, type_at, offset_at, ne, ttype, offset)
        )
    lay.data_offset = (pos + alignment - 1) // alignment * alignment
    lay.data_end = lay.data_offset + max(t.offset + t.nbytes for t in lay.tensors)
    return lay


def patched(data: bytes, at: int, fmt: str, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, at, value)
    return bytes(buf)


# ------------------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return build_llama(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf")


@pytest.fixture(scope="module")
def layout(valid: bytes) -> Layout:
    return walk(valid)


def assert_valid_loads(valid: bytes) -> None:
    model = geist.Model.from_buffer(valid)
    try:
        assert model.n_vocab == N_VOCAB
    finally:
        model.close()


def expect_error(
    valid: bytes,
    bad: bytes,
    exc: type[Exception],
    words: tuple[str, ...],
    status: int | None = None,
) -> str:
    """Loading `bad` raises `exc` with every word of `words` in its message; a valid model still
    loads afterwards. Returns the message."""
    with pytest.raises(exc) as info:
        geist.Model.from_buffer(bad)
    err = info.value
    msg = str(err)
    assert isinstance(err, geist.GeistError)
    assert isinstance(err.status, int)
    if status is not None:
        assert err.status == status, msg
    for word in words:
        assert word in msg, f"{word!r} not in {msg!r}"
    assert_valid_loads(valid)
    return msg


# ------------------------------------------------------------------------------------------------
# Tests


def test_valid_model_loads(valid: bytes, layout: Layout) -> None:
    assert len(layout.tensors) == 2 + 9 * N_LAYER
    assert layout.data_end <= len(valid)
    assert_valid_loads(valid)
    assert_valid_loads(bytearray(valid))  # any buffer type the binding accepts


def _cut_points(layout: Layout) -> list[int]:
    """20 cuts spread over header, metadata, tensor infos and data (5 in each region); every cut
    is before the end of the last tensor, so each leaves something needed out."""
    regions = [
        (0, 24),
        (24, layout.tensor_info_at),
        (layout.tensor_info_at, layout.data_offset),
        (layout.data_offset, layout.data_end),
    ]
    cuts: list[int] = []
    for lo, hi in regions:
        cuts += [int(x) for x in np.linspace(lo, hi - 1, 5)]
    assert len(set(cuts)) == 20
    return cuts


def test_truncated(valid: bytes, layout: Layout) -> None:
    for cut in _cut_points(layout):
        with pytest.raises(geist.BadFormatError) as info:
            geist.Model.from_buffer(valid[:cut])
        assert info.value.status == BAD_FORMAT
        msg = str(info.value)
        assert any(w in msg for w in ("truncated", "exceeds", "past end")), (cut, msg)
    assert_valid_loads(valid)


def test_wrong_magic(valid: bytes) -> None:
    bad = b"GGUX" + valid[4:]
    expect_error(valid, bad, geist.BadFormatError, ("magic",), BAD_FORMAT)


@pytest.mark.parametrize("version", [1, 99])
def test_unsupported_version(valid: bytes, version: int) -> None:
    bad = patched(valid, 4, "<I", version)
    expect_error(valid, bad, geist.UnsupportedError, ("version", str(version)), UNSUPPORTED)


def test_tensor_data_past_end(valid: bytes, layout: Layout) -> None:
    last = max(layout.tensors, key=lambda t: t.offset)
    beyond = (len(valid) + 1024) // 32 * 32  # aligned, relative to the data section: past the end
    bad = patched(valid, last.offset_at, "<Q", beyond)
    expect_error(valid, bad, geist.BadFormatError, (last.name, "past end"), BAD_FORMAT)


def test_tensor_offset_misaligned(valid: bytes, layout: Layout) -> None:
    t = layout.tensors[1]
    bad = patched(valid, t.offset_at, "<Q", t.offset + 4)
    expect_error(valid, bad, geist.BadFormatError, (t.name, "aligned"), BAD_FORMAT)


def test_overlapping_tensors(valid: bytes, layout: Layout) -> None:
    a, b = layout.tensors[0], layout.tensors[1]
    bad = patched(valid, b.offset_at, "<Q", a.offset)
    expect_error(valid, bad, geist.BadFormatError, ("overlap",), BAD_FORMAT)


def test_tensor_count_2_63(valid: bytes) -> None:
    bad = patched(valid, 8, "<Q", 1 << 63)
    expect_error(valid, bad, geist.BadFormatError, ("tensor count", str(1 << 63)), BAD_FORMAT)


def test_kv_count_2_63(valid: bytes) -> None:
    bad = patched(valid, 16, "<Q", 1 << 63)
    expect_error(valid, bad, geist.BadFormatError, ("count", str(1 << 63)), BAD_FORMAT)


def test_string_length_2_63(valid: bytes, layout: Layout) -> None:
    kv = layout.kv("general.architecture")
    bad = patched(valid, kv.value_at, "<Q", 1 << 63)
    expect_error(
        valid,
        bad,
        geist.BadFormatError,
        ("general.architecture", "length", str(1 << 63)),
        BAD_FORMAT,
    )


def test_array_length_2_63(valid: bytes, layout: Layout) -> None:
    kv = layout.kv("tokenizer.ggml.tokens")
    bad = patched(valid, kv.value_at + 4, "<Q", 1 << 63)  # after the u32 element type
    expect_error(
        valid, bad, geist.BadFormatError, ("tokenizer.ggml.tokens", "array length"), BAD_FORMAT
    )


def test_unknown_value_type(valid: bytes, layout: Layout) -> None:
    kv = layout.kv("general.name")
    bad = patched(valid, kv.type_at, "<I", 77)
    expect_error(valid, bad, geist.BadFormatError, ("general.name", "77"), BAD_FORMAT)


def test_unknown_tensor_type(valid: bytes, layout: Layout) -> None:
    t = layout.tensors[1]
    bad = patched(valid, t.type_at, "<I", 200)
    expect_error(valid, bad, geist.UnsupportedError, (t.name, "200"), UNSUPPORTED)


def test_dimension_product_overflow(valid: bytes, layout: Layout) -> None:
    t = next(t for t in layout.tensors if len(t.ne) == 2)
    bad = patched(valid, t.dims_at, "<Q", 1 << 32)
    bad = patched(bad, t.dims_at + 8, "<Q", 1 << 32)
    expect_error(valid, bad, geist.BadFormatError, (t.name, "overflow"), BAD_FORMAT)


def test_zero_dimension(valid: bytes, layout: Layout) -> None:
    t = layout.tensors[0]
    bad = patched(valid, t.dims_at + 8, "<Q", 0)
    expect_error(valid, bad, geist.BadFormatError, (t.name, "is 0"), BAD_FORMAT)


def test_too_many_dimensions(valid: bytes, layout: Layout) -> None:
    t = layout.tensors[0]
    bad = patched(valid, t.n_dims_at, "<I", 5)
    expect_error(valid, bad, geist.BadFormatError, (t.name, "dimensions"), BAD_FORMAT)


def test_missing_required_key(tmp_path: Path, valid: bytes) -> None:
    bad = build_llama(tmp_path / "no-block-count.gguf", skip_keys=frozenset({"llama.block_count"}))
    walk(bad)  # still a well-formed GGUF: only the model layer can object
    expect_error(valid, bad, geist.GeistError, ("llama.block_count",))


def test_unknown_architecture(tmp_path: Path, valid: bytes) -> None:
    bad = build_llama(tmp_path / "xyzzy.gguf", arch="xyzzy")
    walk(bad)
    expect_error(valid, bad, geist.GeistError, ("xyzzy",))


def test_failures_leave_no_trace(valid: bytes, layout: Layout) -> None:
    """Many failed loads in a row, then a good one: nothing accumulates or sticks."""
    corruptions: list[Callable[[bytes], bytes]] = [
        lambda d: d[: layout.data_offset],
        lambda d: patched(d, 8, "<Q", 1 << 63),
        lambda d: patched(d, layout.tensors[0].type_at, "<I", 200),
    ]
    for _ in range(50):
        for corrupt in corruptions:
            with pytest.raises(geist.GeistError):
                geist.Model.from_buffer(corrupt(valid))
    assert_valid_loads(valid)


# ------------------------------------------------------------------------------------------------
# Loader bug classes from llama.cpp's public history that test_gguf.c does not already hold at
# the GGUF layer: metadata counts that size allocations, values of the wrong type for known keys,
# token ids past the vocabulary.


def test_block_count_bounded_by_tensors(valid: bytes, layout: Layout) -> None:
    """Issue 20: block_count 13,172,737 in a small file made the loader calloc 5.7 GB for the
    layer table before any tensor was checked. It must fail fast, naming the key (the OOM walk
    test, native/tests/oom/test_oom_walk.c, checks how little it allocates)."""
    at = layout.kv("llama.block_count").value_at
    for count in (13_172_737, N_LAYER + 1, (1 << 24)):
        bad = patched(valid, at, "<I", count)
        msg = expect_error(valid, bad, geist.BadFormatError, ("llama.block_count",), BAD_FORMAT)
        if count == 13_172_737:
            assert "13172737" in msg and "tensors" in msg, msg


@pytest.mark.parametrize("key", ["llama.block_count", "llama.embedding_length",
                                 "llama.attention.head_count", "llama.feed_forward_length"])
def test_known_key_of_the_wrong_type(valid: bytes, layout: Layout, key: str) -> None:
    """A uint32 key whose type says float32 (same size, so the file still parses)."""
    bad = patched(valid, layout.kv(key).type_at, "<I", 6)
    expect_error(valid, bad, geist.BadFormatError, (key,), BAD_FORMAT)


@pytest.mark.parametrize("value", [N_VOCAB, 0x7FFFFFFF, 0xFFFFFFFF])
def test_special_token_id_past_the_vocabulary(valid: bytes, layout: Layout, value: int) -> None:
    """tokenizer.ggml.bos_token_id past the vocabulary: refused with the key named, or ignored;
    never used as an index."""
    bad = patched(valid, layout.kv("tokenizer.ggml.bos_token_id").value_at, "<I", value)
    try:
        model = geist.Model.from_buffer(bad)
    except geist.GeistError as err:
        assert "bos" in str(err), str(err)
        return
    try:
        ids = model.tokenize("hello")
        assert all(0 <= i < N_VOCAB for i in ids)
    finally:
        model.close()


VT = gguf.GGUFValueType


@pytest.mark.parametrize(("key", "value", "vtype", "sub", "words"), [
    # the vocabulary as numbers, as one string, its types as floats or strings, its merges as
    # numbers, scores as strings or too few: each refused naming the key, nothing read as the
    # wrong type
    ("tokenizer.ggml.tokens", list(range(N_VOCAB)), VT.ARRAY, VT.INT32, ("not a string array",)),
    ("tokenizer.ggml.tokens", "hello", VT.STRING, None, ("not a string array",)),
    ("tokenizer.ggml.tokens", [0.5] * N_VOCAB, VT.ARRAY, VT.FLOAT32, ("not a string array",)),
    ("tokenizer.ggml.token_type", [1.0] * N_VOCAB, VT.ARRAY, VT.FLOAT32, ("not an i32 array",)),
    ("tokenizer.ggml.token_type", ["1"] * N_VOCAB, VT.ARRAY, VT.STRING, ("not an i32 array",)),
    ("tokenizer.ggml.token_type", [1] * (N_VOCAB - 1), VT.ARRAY, VT.INT32,
     (f"{N_VOCAB - 1} entries for {N_VOCAB} tokens",)),
    ("tokenizer.ggml.token_type", 1, VT.INT32, None, ("not an i32 array",)),
    ("tokenizer.ggml.scores", ["0.5"] * N_VOCAB, VT.ARRAY, VT.STRING,
     ("not an f32 or i32 array",)),
    ("tokenizer.ggml.scores", [0.5] * 3, VT.ARRAY, VT.FLOAT32, ("3 entries for",)),
    ("tokenizer.ggml.merges", list(range(5)), VT.ARRAY, VT.INT32, ("not a string array",)),
])
def test_tokenizer_key_of_the_wrong_type(tmp_path: Path, valid: bytes, key: str, value: object,
                                         vtype: gguf.GGUFValueType,
                                         sub: gguf.GGUFValueType | None,
                                         words: tuple[str, ...]) -> None:
    bad = build_llama(tmp_path / "wrong.gguf", replace={key: (value, vtype, sub)})
    walk(bad)  # a well-formed GGUF: only the tokenizer can object
    expect_error(valid, bad, geist.BadFormatError, (key, *words), BAD_FORMAT)


@pytest.mark.parametrize("length", [(1 << 64) - 1, (1 << 63), (1 << 32) + 13, (1 << 32) - 1])
def test_token_length_negative_or_huge(valid: bytes, layout: Layout, length: int) -> None:
    """The first token's string length as -1, 2^63, just past and below 2^32 (a 32-bit truncation
    of 2^32 + 13 would read '<|endoftext|>', whose 13 bytes are there)."""
    at = layout.kv("tokenizer.ggml.tokens").value_at + 4 + 8  # element type, count, then [0]
    assert struct.unpack_from("<Q", valid, at)[0] == len("<|endoftext|>")
    bad = patched(valid, at, "<Q", length)
    expect_error(valid, bad, geist.BadFormatError,
                 ("tokenizer.ggml.tokens", "element 0", f"string length {length}"), BAD_FORMAT)


@pytest.mark.parametrize("delta", [1 << 32, 1 << 63])
def test_token_count_past_2_32_or_2_63(valid: bytes, layout: Layout, delta: int) -> None:
    """The vocabulary's count plus 2^32 (truncated to 32 bits it would be the real count)."""
    at = layout.kv("tokenizer.ggml.tokens").value_at + 4
    bad = patched(valid, at, "<Q", N_VOCAB + delta)
    expect_error(valid, bad, geist.BadFormatError,
                 ("tokenizer.ggml.tokens", f"array length {N_VOCAB + delta}"), BAD_FORMAT)


def test_tensor_and_key_counts_past_2_32(valid: bytes, layout: Layout) -> None:
    n_tensors, n_kv = struct.unpack_from("<QQ", valid, 8)
    bad = patched(valid, 8, "<Q", n_tensors + (1 << 32))
    expect_error(valid, bad, geist.BadFormatError, ("tensor count", str(n_tensors + (1 << 32))),
                 BAD_FORMAT)
    bad = patched(valid, 16, "<Q", n_kv + (1 << 32))
    expect_error(valid, bad, geist.BadFormatError, ("key count", str(n_kv + (1 << 32))),
                 BAD_FORMAT)


def test_tensor_bytes_wrapping_past_2_64(valid: bytes, layout: Layout) -> None:
    """A 1-d F32 tensor of 2^62 + 16 elements: its byte size wraps to 64, which would fit."""
    t = next(t for t in layout.tensors if len(t.ne) == 1 and t.type == 0)
    bad = patched(valid, t.dims_at, "<Q", (1 << 62) + 16)
    expect_error(valid, bad, geist.BadFormatError, (t.name, "overflows"), BAD_FORMAT)


def test_duplicate_tensor_name(valid: bytes, layout: Layout) -> None:
    """One tensor renamed to another's name of the same length (the file stays well-formed)."""
    a, b = next((a, b) for a in layout.tensors for b in layout.tensors
                if a is not b and len(a.name) == len(b.name))
    buf = bytearray(valid)
    buf[b.name_len_at + 8 : b.name_len_at + 8 + len(b.name)] = a.name.encode()
    expect_error(valid, bytes(buf), geist.BadFormatError, ("duplicate tensor name", a.name),
                 BAD_FORMAT)


def test_duplicate_key(valid: bytes, layout: Layout) -> None:
    """One metadata key renamed to another's of the same length."""
    a, b = next((a, b) for a in layout.kvs for b in layout.kvs
                if a is not b and len(a.key) == len(b.key))
    buf = bytearray(valid)
    buf[b.key_len_at + 8 : b.key_len_at + 8 + len(b.key)] = a.key.encode()
    expect_error(valid, bytes(buf), geist.BadFormatError, ("duplicate metadata key", a.key),
                 BAD_FORMAT)


def test_a_tokenizer_with_more_tokens_than_embedding_rows_is_refused() -> None:
    """Found by the fuzz campaign: 300 tokens over a 239-row token_embd gave token ids past the
    logits (a read past the embedding table on the next step)."""
    regressions = Path(__file__).resolve().parents[1] / "fuzz" / "regressions" / "gguf"
    path = regressions / "tokens_past_embedding_rows.gguf"
    with pytest.raises(geist.BadFormatError,
                       match=r"has 300 tokens but token_embd.weight has 239 rows"):
        geist.Model.load(path)
