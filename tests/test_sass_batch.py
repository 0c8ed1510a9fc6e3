"""SASS counts of a batch of cubins from one nvidia disassembler run (sass.sass_counts_many), and
the build's deferral of them to that batch: the same counts and metadata as one cuobjdump per cubin."""

import pytest

from cubinforge.generator import build, sass
from cubinforge.generator.compile_worker import CompileResult
from cubinforge.generator.cubin_elf import code_of, read_cubin
from cubinforge.generator.kernel_build import KernelBuild
from cubinforge.generator.metadata import kernel_metadata, with_sass

needs_tools = pytest.mark.skipif(sass.find_cuobjdump() is None or sass.find_nvdisasm() is None,
                                 reason="cuobjdump/nvdisasm not installed (pip nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")


def _cubins(reg):
    return {r["name"]: reg.read_blob(r["cubin"]["sha256"]) for r in reg.list()}


@needs_tools
def test_one_raw_run_counts_what_cuobjdump_counts_per_cubin(demo_registry):
    cubins = _cubins(demo_registry)
    names = sorted(cubins)
    assert {code_of(c)[0] for c in cubins.values()} == {"sm_90a", "sm_100a"}  # mixed arches in one call
    batched = sass.sass_counts_many([cubins[n] for n in names])
    assert batched == [sass.sass_counts(cubins[n]) for n in names]
    assert all(c["instructions"] > 0 for c in batched)
    for arch in ("sm_90a", "sm_100a"):  # the raw path itself, not its per-cubin fallback
        codes = [code_of(cubins[n])[1] for n in names if code_of(cubins[n])[0] == arch]
        raw = sass._raw_counts(arch, codes)
        assert raw is not None and [r["instructions"] for r in raw] == [len(c) // 16 for c in codes]


@needs_tools
def test_batch_falls_back_per_cubin_when_the_raw_run_cannot_be_split(demo_registry, monkeypatch):
    cubins = list(_cubins(demo_registry).values())
    want = [sass.sass_counts(c) for c in cubins]
    assert sass._raw_counts("sm_90a", [b"\0" * 24]) is None  # not whole 16-byte slots
    monkeypatch.setattr(sass, "_raw_counts", lambda arch, codes: None)
    assert sass.sass_counts_many(cubins) == want
    monkeypatch.setattr(sass, "find_cuobjdump", lambda: None)  # no tools at all: no counts, no error
    assert sass.sass_counts_many(cubins + [b"not an elf"]) == [None] * (len(cubins) + 1)


def _build_of(cubin, extra):
    info = read_cubin(cubin)
    return info, info.kernel(info.entries[0]), KernelBuild(
        cubin=cubin, entry=info.entries[0], block=(128, 1, 1), cluster=(1, 1, 1), dynamic_smem_bytes=0,
        contract={}, compile_options="", extra=extra)


@needs_tools
@pytest.mark.parametrize("extra", [{}, {"tile_m": 128}])
def test_with_sass_completes_metadata_as_kernel_metadata_would(demo_registry, extra):
    cubin = next(iter(_cubins(demo_registry).values()))
    info, kernel, kb = _build_of(cubin, extra)
    counts = sass.sass_counts(cubin)
    full, bare = kernel_metadata(info, kernel, kb, counts), kernel_metadata(info, kernel, kb, None)
    assert "sass" in full and "sass" not in bare and bare["spill_store_bytes"] == 0  # stack frame 0
    later = with_sass(bare, counts)
    assert later == full and list(later) == list(full)  # the same keys in the same order
    assert with_sass(full, None) == bare


def test_sass_batch_holds_pending_results_until_flushed(monkeypatch):
    seen = []
    calls = []

    def fake_many(cubins):
        calls.append(list(cubins))
        return [{"spill_store_bytes": 0, "spill_load_bytes": 0, "hgmma": len(c), "qgmma": 0, "utmaldg": 0,
                 "utmastg": 0, "ldl": 0, "stl": 0, "warpgroup": 0, "instructions": 7} for c in cubins]

    monkeypatch.setattr(build, "sass_counts_many", fake_many)
    batch = build._SassBatch(seen.append)
    meta = {"stack_frame_bytes": 8, "spill_store_bytes": None, "spill_load_bytes": None, "kernel": {"t": 1}}
    pending = [CompileResult(f"v{i}", ok=True, cubin=b"x" * i, metadata=dict(meta), sass_pending=True) for i in (1, 2)]
    failed = CompileResult("bad", ok=False, error="boom")
    batch.add(pending[0])
    batch.add(failed)
    batch.add(pending[1])
    assert [r.variant for r in seen] == ["bad"] and not calls  # a failure is not held back
    batch.flush()
    assert calls == [[b"x", b"xx"]] and [r.variant for r in seen] == ["bad", "v1", "v2"]
    assert [r.metadata["sass"]["hgmma"] for r in seen[1:]] == [1, 2]
    assert all(not r.sass_pending and list(r.metadata)[-2:] == ["sass", "kernel"] for r in seen[1:])
    batch.flush()
    assert len(calls) == 1  # nothing held, no run


def test_demo_build_stores_the_batched_counts(demo_registry):
    """build.build went through the batch (CompileJob.sass False): every manifest has its counts."""
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not installed")
    for name, cubin in _cubins(demo_registry).items():
        meta = demo_registry.get(name)["metadata"]
        assert meta["sass"] == with_sass({"stack_frame_bytes": 0}, sass.sass_counts(cubin))["sass"], name


# ---------------------------------------------------------------- SM90 opcodes read from the bytes


def _slots(*codes: int, high: int = 0xF000) -> bytes:
    """One 16-byte slot per opcode, with bits above the opcode set (they must not matter)."""
    return b"".join(((c | high).to_bytes(2, "little") + b"\xab" * 14) for c in codes)


def test_sm90_opcodes_count_each_slot_by_its_low_12_bits():
    from cubinforge.generator import sass_sm90

    code = _slots(0x9F0, 0xDF0, 0x5B4, 0x3B5, 0x918, 0x918, 0x9F3, 0x223, 0x823)
    named = sass_sm90.mnemonics("sm_90a", code)
    assert named == {"HGMMA": 2, "UTMALDG": 1, "UTMASTG": 1, "NOP": 2, "QGMMA": 1, "FFMA": 2}
    counts = sass._count_many((op, "", n) for op, n in named.items())
    assert counts == sass._count((op, "") for op in
                                 ["HGMMA", "HGMMA", "UTMALDG", "UTMASTG", "NOP", "NOP", "QGMMA", "FFMA", "FFMA"])
    assert (counts["hgmma"], counts["qgmma"], counts["utmaldg"], counts["utmastg"], counts["instructions"]) == (2, 1, 1, 1, 9)


def test_sm90_opcodes_give_up_where_nvdisasm_must_read():
    from cubinforge.generator import sass_sm90

    assert 0x001 not in sass_sm90.OPCODES
    known = _slots(0x9F0, 0x918)
    assert sass_sm90.mnemonics("sm_90a", known) is not None
    assert sass_sm90.mnemonics("sm_90a", known + _slots(0x001)) is None  # a code the table lacks
    assert sass_sm90.mnemonics("sm_90a", known + _slots(0x983)) is None  # LDL: its width is a modifier
    assert sass_sm90.mnemonics("sm_90a", known + _slots(0x387)) is None  # STL
    assert sass_sm90.mnemonics("sm_90a", known[:-8]) is None  # a partial slot
    assert sass_sm90.mnemonics("sm_100a", known) is None  # another ISA
    with pytest.raises(ValueError, match="both"):
        sass_sm90.learn(_slots(0x9F0, 0x9F0), {0: "HGMMA", 16: "NOP"})


@needs_tools
def test_sm90_opcode_table_agrees_with_nvdisasm_and_spares_its_run(demo_registry, monkeypatch):
    from cubinforge.generator import sass_sm90

    cubins = [c for c in _cubins(demo_registry).values() if code_of(c)[0] == "sm_90a"]
    want = [sass.sass_counts(c) for c in cubins]
    fast = 0
    for cubin in cubins:
        arch, code = code_of(cubin)
        read = sass.raw_instructions(arch, code)
        learned = sass_sm90.learn(code, {offset: op for offset, op, _ in read})
        assert all(sass_sm90.OPCODES.get(op, name) == name for op, name in learned.items())
        fast += sass_sm90.mnemonics(arch, code) is not None
    assert cubins and fast == len(cubins)  # every demo SM90 cubin is read from its bytes
    ran = []
    monkeypatch.setattr(sass, "raw_instructions", lambda *a, **k: ran.append(a))
    assert sass.sass_counts_many(cubins) == want and not ran  # cuobjdump's counts, no nvdisasm run
