"""stackdist/malloc.py: glibc accepts the thresholds (so freed simulation arrays stay in the heap);
elsewhere the call is a no-op that says so."""

from __future__ import annotations

import ctypes.util
import sys

import pytest

from stackdist.malloc import keep_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux") or ctypes.util.find_library("c") != "libc.so.6",
                    reason="glibc only")
def test_glibc_takes_the_thresholds():
    assert keep_freed_memory() is True


def test_elsewhere_it_says_no(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert keep_freed_memory() is False
