"""The GPU suite's sharding (tests/conftest.py's --shard and --alone, driven by tests/gpu/run_shards.py): a test
marked gpu_alone runs in no shard, and --alone runs exactly those, so the tests that need most of the GPU's memory
never share it with the shards' processes."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["pytester"]

CONFTEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conftest.py")
TESTS = """
import pytest

@pytest.mark.gpu_alone
def test_big():
    pass

@pytest.mark.slow
def test_slow():
    pass

def test_a():
    pass

def test_b():
    pass
"""


def _ran(pytester: pytest.Pytester, *args: str) -> set[str]:
    result = pytester.runpytest("-p", "no:cacheprovider", "-v", *args)
    return {line.split("::")[1].split()[0] for line in result.outlines if "::" in line and "PASSED" in line}


@pytest.mark.slow
def test_gpu_alone_tests_run_in_no_shard_and_alone_after(pytester: pytest.Pytester) -> None:
    with open(CONFTEST) as f:
        pytester.makeconftest(f.read())
    pytester.makepyfile(test_sharded=TESTS)
    assert _ran(pytester, "--alone") == {"test_big"}
    shards = [_ran(pytester, f"--shard={i}/3") for i in range(3)]
    assert shards[0] == {"test_slow"}  # slow tests in shard 0, the rest round-robin; test_big in none
    assert shards[1] | shards[2] == {"test_a", "test_b"} and not shards[1] & shards[2]
    assert _ran(pytester) == {"test_big", "test_slow", "test_a", "test_b"}  # no option: everything
    result = pytester.runpytest("--alone", "--shard=0/2")
    assert result.ret != 0 and "--alone and --shard exclude each other" in "\n".join(result.errlines)
