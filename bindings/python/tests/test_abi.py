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


def test_every_status_of_the_header_has_its_own_exception():
    # The table is keyed by the SWIG module's constants; a status added to the header
    # without an exception class here would only map by category.
    from bspa._errors import _BY_STATUS

    statuses = {name: getattr(_bspa, name) for name in dir(_bspa) if name.startswith("BSPA_ERR_")}
    assert statuses, "the SWIG module exports no BSPA_ERR_* constant"
    for name, status in statuses.items():
        assert status in _BY_STATUS, f"{name} = {status} has no exception class"
        err = bspa.error_for(status, "m")
        assert err.status == status and err.status_name == name


def test_device_and_element_codes_come_from_the_header():
    from bspa import _tensor

    assert (_tensor.kDLCPU, _tensor.kDLCUDA) == (_bspa.kDLCPU, _bspa.kDLCUDA)
    assert (_tensor._kDLFloat, _tensor._kDLBfloat) == (_bspa.kDLFloat, _bspa.kDLBfloat)
