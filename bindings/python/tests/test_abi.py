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


def test_launch_args_structs_are_versioned():
    # Pool.kv_write / Pool.prefill fill these; a struct of a version this library does not
    # know is refused before the pool or batch is looked at.
    kw = _bspa.bspa_kv_write_args()
    assert _bspa.bspa_kv_write_args_init(kw) == _bspa.BSPA_OK
    assert (kw.version, kw.layer, kw.k_new, kw.v_new) == (_bspa.BSPA_KV_WRITE_ARGS_VERSION, 0, 0, 0)
    pf = _bspa.bspa_prefill_args()
    assert _bspa.bspa_prefill_args_init(pf) == _bspa.BSPA_OK
    assert (pf.version, pf.layer, pf.q, pf.out, pf.lse, pf.scale) == (_bspa.BSPA_PREFILL_ARGS_VERSION, 0, 0, 0, 0, 1.0)
    assert pf.layout is None
    for version in (0, _bspa.BSPA_KV_WRITE_ARGS_VERSION + 1):
        kw.version = version
        assert _bspa.bspa_kv_write(None, None, kw, None) == _bspa.BSPA_ERR_VERSION
        assert "args->version" in _bspa.bspa_last_error()
    for version in (0, _bspa.BSPA_PREFILL_ARGS_VERSION + 1):
        pf.version = version
        assert _bspa.bspa_prefill(None, None, pf, None) == _bspa.BSPA_ERR_VERSION
    assert _bspa.bspa_prefill(None, None, None, None) == _bspa.BSPA_ERR_NULL_POINTER
