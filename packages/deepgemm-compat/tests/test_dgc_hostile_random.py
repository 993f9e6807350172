"""Random numbers for every bound of ``plan_warmup`` and ``deepgemm-compat plan``.

Beside the fixed tables in ``test_dgc_hostile.py``: hypothesis draws ints near each bound, past
it and anywhere (``st.integers()`` reaches hundreds of bits). The expected outcome is worked out
here from the bounds as the docs state them (written out below, not read from ``_bounds``):
in bounds, a plan is made; out of bounds, one line that names a flag or argument out of its bound,
exit 2 / InputError, and no traceback.
"""

from __future__ import annotations

import pytest
from deepgemm_compat import InputError
from deepgemm_compat.cli import main
from deepgemm_compat.warmup import CPSetup, glm51_reduced_shapes, plan_warmup
from hostile_cli import run_in_process
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

C_INT = 2**31 - 1


def near(*edges: int, valid: st.SearchStrategy[int] | None = None) -> st.SearchStrategy[int]:
    """Ints at and next to each edge, small ints, any int at all, and (half the time) ``valid``,
    so that a fair share of the draws is in bounds on every flag at once."""
    around = [e + d for e in edges for d in (-1, 0, 1)]
    anything = st.one_of(st.sampled_from(around), st.integers(-100, 100), st.integers())
    return anything if valid is None else st.one_of(valid, anything)


def divisors(n: int) -> st.SearchStrategy[int]:
    return st.sampled_from([d for d in range(1, n + 1) if n % d == 0])


# The library ---------------------------------------------------------------------------------
def library_problems(chunked: int, cp: int, floor: int, mk: int) -> list[str]:
    """The names of plan_warmup's arguments out of their stated bounds."""
    bad = []
    if not (chunked == -1 or 1 <= chunked <= C_INT):
        bad.append("chunked_prefill_size")
    if not 1 <= cp <= 72:
        bad.append("cp.size")
    if not 1 <= floor <= C_INT:
        bad.append("floor")
    if not 1 <= mk <= 1024:
        bad.append("mk_alignment")
    return bad


@settings(max_examples=60, deadline=None)
@given(
    chunked=near(-1, 0, 64, C_INT, valid=st.integers(1, C_INT)),
    cp=near(1, 8, 72, valid=st.integers(1, 72)).filter(lambda n: n >= 1),  # CPSetup refuses < 1
    split=st.sampled_from(["zigzag", "interleave", "none"]),
    floor=near(1, 2048, C_INT, valid=st.integers(1, C_INT)),
    mk=near(1, 128, 1024, valid=st.integers(1, 1024)),
)
@example(chunked=10**12, cp=10**9, split="zigzag", floor=2048, mk=128)
@example(chunked=C_INT, cp=72, split="zigzag", floor=C_INT, mk=1024)
def test_plan_warmup_on_any_ints(chunked, cp, split, floor, mk):
    bad = library_problems(chunked, cp, floor, mk)
    args = (glm51_reduced_shapes(), chunked, CPSetup(cp, split))
    kwargs = {"floor": floor, "mk_alignment": mk, "source": "copy"}
    if bad:
        with pytest.raises(InputError) as info:
            plan_warmup(*args, **kwargs)
        message = str(info.value)
        assert "\n" not in message and message.split(" ")[0].split("=")[0] in bad, message
        assert "must be" in message or "fix:" in message
    else:
        plan = plan_warmup(*args, **kwargs)
        assert plan.chunked_prefill_size == chunked and plan.after_total <= plan.before_total
    event("accepted" if not bad else "refused")


# The CLI -------------------------------------------------------------------------------------
def cli_problems(
    chunked: int, cp: int, floor: int, ep: int, attn_tp: int, mk: int, dense_tp: int, shared_tp: int
) -> list[str]:
    """The flags out of ``deepgemm-compat plan``'s stated bounds (its --help epilog)."""
    bad = []
    if not (chunked == -1 or (1 <= chunked <= C_INT and chunked % 64 == 0)):
        bad.append("--chunked")
    if not 1 <= cp <= 8:
        bad.append("--cp")
    if not 1 <= floor <= C_INT:
        bad.append("--floor")
    if not (1 <= ep <= 256 and 256 % ep == 0):
        bad.append("--ep")
    if not (1 <= attn_tp <= 64 and 64 % attn_tp == 0):
        bad.append("--attn-tp")
    if not (1 <= dense_tp <= 12288 and 12288 % dense_tp == 0):
        bad.append("--dense-tp")
    if not (1 <= shared_tp <= 2048 and 2048 % shared_tp == 0):
        bad.append("--shared-tp")
    if not 1 <= mk <= 1024:
        bad.append("--mk-alignment")
    return bad


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    chunked=near(-1, 0, 64, 8192, C_INT - 63, valid=st.integers(1, C_INT // 64).map((64).__mul__)),
    cp=near(1, 8, valid=st.integers(1, 8)),
    floor=near(1, C_INT, valid=st.integers(1, C_INT)),
    ep=near(1, 8, 256, valid=divisors(256)),
    attn_tp=near(1, 64, valid=divisors(64)),
    mk=near(1, 1024, valid=st.integers(1, 1024)),
    dense_tp=near(1, 8, 12288, valid=divisors(12288)),
    shared_tp=near(1, 8, 2048, valid=divisors(2048)),
)
@example(chunked=2147483584, cp=8, floor=C_INT, ep=256, attn_tp=64, mk=1024, dense_tp=8,
         shared_tp=1)  # fmt: skip
@example(chunked=10**12, cp=10**9, floor=0, ep=7, attn_tp=3, mk=0, dense_tp=5, shared_tp=3)
def test_plan_command_on_any_ints(
    workdir, chunked, cp, floor, ep, attn_tp, mk, dense_tp, shared_tp
):
    argv = [
        "plan", f"--chunked={chunked}", f"--cp={cp}", f"--floor={floor}", f"--ep={ep}",
        f"--attn-tp={attn_tp}", f"--mk-alignment={mk}", f"--dense-tp={dense_tp}",
        f"--shared-tp={shared_tp}", "--split", "zigzag",
        "--shapes", "glm51-reduced", "--m-list", "copy",
    ]  # fmt: skip
    bad = cli_problems(chunked, cp, floor, ep, attn_tp, mk, dense_tp, shared_tp)
    run = run_in_process(main, argv)
    assert "Traceback" not in run.err and run.spawns == []
    if bad:
        assert run.code == 2 and run.out == "" and run.err.count("\n") == 1
        flag = run.err.split("error: ")[1].split(" ")[0].split("=")[0]
        assert flag in bad, run.err
    else:
        assert run.code == 0 and run.err == "" and f"chunked_prefill_size={chunked}" in run.out
    event("accepted" if not bad else "refused")


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path
