"""qbench.hardware (the machine part): the CPU record (model, instruction-set flags, caches) and machine_differences,
which readers call before comparing two files' timings (issue 24, item 4). Torch-free."""

from __future__ import annotations

import subprocess
import sys

from qbench.hardware import cache_sizes, cpu_record, machine_differences, parse_cpuinfo

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse4_2 avx f16c fma avx2 bmi2

processor\t: 1
vendor_id\t: AuthenticAMD
flags\t\t: fpu avx512f
"""


def _env(flags, capability, model="1", l3=32 << 20, cpu="AMD EPYC", **extra):
    return {"device": "cpu", "cpu": cpu, "cpu_count": 2, "torch_threads": 2,
            "cpu_info": {"model_name": cpu, "vendor": "AuthenticAMD", "family": "25", "model": model, "stepping": "1",
                         "flags": flags, "caches": {"L1d": 32768, "L2": 512 << 10, "L3": l3},
                         "capability": capability}, **extra}


def test_parse_cpuinfo_reads_the_first_processor_only():
    got = parse_cpuinfo(ZEN3)
    assert got == {"model_name": "AMD EPYC", "vendor": "AuthenticAMD", "family": "25", "model": "1",
                   "stepping": "1", "flags": ["sse4_2", "avx", "avx2", "fma", "f16c"]}
    assert parse_cpuinfo("")["flags"] == [] and parse_cpuinfo("")["model_name"] is None


def test_cache_sizes_from_a_sysfs_tree(tmp_path):
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                             (3, "Unified", "32768K")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert cache_sizes(tmp_path) == {"L1d": 49152, "L1i": 32768, "L2": 1 << 20, "L3": 32 << 20}
    assert cache_sizes(tmp_path / "none") == {}


def test_cpu_record_of_missing_files_has_none_fields(tmp_path):
    got = cpu_record(tmp_path / "cpuinfo", tmp_path / "cache", capability="AVX2")
    assert got["model_name"] is None and got["flags"] == [] and got["caches"] == {} and got["capability"] == "AVX2"


def test_the_reviews_two_amd_epycs_are_told_apart():
    """The newcomer review's case: an AVX2-only Zen 3 and the AVX-512-BF16 host of the committed
    CPU file, both "AMD EPYC"."""
    a = _env(["avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16"], "AVX512", model="17")
    b = _env(["avx", "avx2", "fma", "f16c"], "AVX2", model="1", l3=32 << 20)
    assert machine_differences(a, b) == [
        "CPU vendor/family/model: AuthenticAMD/25/17 (A) vs AuthenticAMD/25/1 (B)",
        "CPU capability (torch.backends.cpu.get_cpu_capability): AVX512 (A) vs AVX2 (B): torch runs other CPU kernels",
        "CPU instruction set: only A has avx512f, avx512_vnni, avx512_bf16 (bf16, int8 and bitsandbytes CPU kernels "
        "depend on these)",
    ]
    assert machine_differences(a, a) == []


def test_caches_counts_and_gpus_differ():
    a = _env(["avx2"], "AVX2", l3=32 << 20)
    b = _env(["avx2"], "AVX2", l3=256 << 20, cpu_count=4)
    assert machine_differences(a, b) == ["L3 cache: 32 MiB (A) vs 256 MiB (B)", "CPU count: 2 (A) vs 4 (B)"]
    ga = {"device": "cuda:0", "device_name": "NVIDIA H200", "compute_capability": [9, 0], "sm_count": 132}
    gb = {"device": "cuda:0", "device_name": "NVIDIA H100 80GB HBM3", "compute_capability": [9, 0], "sm_count": 132}
    assert machine_differences(ga, gb) == ["GPU: NVIDIA H200 (A) vs NVIDIA H100 80GB HBM3 (B)"]
    assert machine_differences(ga, a)[0] == "device: cuda (A) vs cpu (B)"


def test_an_older_cpu_file_without_cpu_info_is_said_to_be_unknown():
    old = {"device": "cpu", "cpu": "AMD EPYC", "cpu_count": 2, "torch_threads": 2}
    (line,) = machine_differences(old, _env(["avx2"], "AVX2"))
    assert line.startswith("CPU instruction set unknown: A does not record env.cpu_info")
    assert machine_differences({}, {}) == []  # nothing recorded, nothing said; never raises


def test_machine_imports_no_torch():
    code = "import sys, qbench.hardware; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
