"""The binding refuses a library whose ABI version differs from the header it was built for."""

import pytest

import bspa
from bspa import _bspa


def test_loaded_library_matches_the_binding():
    assert bspa.ABI_VERSION == _bspa.bspa_abi_version()


def test_a_different_abi_version_is_refused(monkeypatch):
    monkeypatch.setattr(_bspa, "bspa_abi_version", lambda: bspa.ABI_VERSION + 1)
    with pytest.raises(bspa.VersionError, match="ABI version"):
        bspa._check_abi()
