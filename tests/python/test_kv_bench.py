"""bench/python/store_kv_bench.py — Mooncake's store_kv_bench usage (put/get,
put_batch/get_batch, put_from/get_into, batch_put_from/batch_get_into,
get_alloc_func_addr buffers, BufferPool leases, isExist, nof_replica_num=0)
— in every --io-api mode and scenario against a real cluster, verifying
every byte read back. Correctness only: no timing is asserted."""
import importlib.util
import os

import pytest

from conftest import HERE

spec = importlib.util.spec_from_file_location(
    "store_kv_bench", os.path.join(HERE, "..", "..", "bench", "python", "store_kv_bench.py"))
kvb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kvb)


@pytest.mark.parametrize("io_api", ["plain", "zcopy", "pool"])
@pytest.mark.parametrize("scenario,batch,jobs", [("verify_write", 1, 1), ("verify_write", 8, 2),
                                                 ("read_perf", 4, 1), ("mixed_rw", 4, 2)])
def test_kv_bench_modes(cluster, capsys, io_api, scenario, batch, jobs):
    rc = kvb.main(["--scenario", scenario, "--io-api", io_api, "--master-server",
                   cluster["master"], "--metadata-server", cluster["metadata"],
                   "--global-segment-size", "0", "--local-buffer-size", str(8 << 20),
                   "--nr-objects", "48", "--value-size", "5000", "--batch-size", str(batch),
                   "--numjobs", str(jobs), "--key-prefix", "kvb%s%s%d" % (io_api, scenario, batch),
                   "--verify"])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = [l for l in out.splitlines() if l.startswith("RESULT")]
    assert lines and all(" failures=0 " in l and "verify_failures=0" in l for l in lines), out
    assert any("keys=48" in l for l in lines), out


def results(out):
    lines = [l for l in out.splitlines() if l.startswith("RESULT")]
    assert lines and all(" failures=0 " in l and "verify_failures=0" in l for l in lines), out
    return lines


def test_kv_bench_mooncakes_other_flags(cluster, capsys, tmp_path):
    """fill, then read_perf --prepare-mode none reads what fill left (pattern
    payloads, ids from --object-id-start), after a --phase-gap-mode file gap,
    iodepth 2 and a 1 s --runtime cycling over the objects."""
    gap = tmp_path / "go"
    gap.write_text("")
    common = ["--master-server", cluster["master"], "--metadata-server", cluster["metadata"],
              "--global-segment-size", "0", "--local-buffer-size", str(8 << 20),
              "--value-size", "3000", "--batch-size", "4", "--key-prefix", "kvbflags",
              "--pattern", "0xdeadbeef01", "--object-id-start", "1000", "--io-api", "zcopy"]
    assert kvb.main(["--scenario", "fill", "--nr-objects", "16"] + common) == 0
    assert any("keys=16" in l for l in results(capsys.readouterr().out))
    rc = kvb.main(["--scenario", "read_perf", "--nr-objects", "16", "--prepare-mode", "none",
                   "--phase-gap-mode", "file", "--phase-gap-file", str(gap), "--iodepth", "2",
                   "--runtime", "1", "--verify", "--log-level", "warning"] + common)
    lines = results(capsys.readouterr().out)
    assert rc == 0 and [l.split()[1] for l in lines] == ["phase=read"], lines
    keys = int(lines[0].split("keys=")[1].split()[0])
    assert keys >= 16 and keys % 4 == 0  # at least one pass, whole batches
    for bad in (["--key-size", "8"], ["--iodepth", "0"], ["--pattern", "0xabc"],
                ["--phase-gap-mode", "file"], ["--nr-objects", "-1"]):
        with pytest.raises(SystemExit) as e:
            kvb.parse_args(["--scenario", "fill"] + bad)
        assert e.value.code == 2
