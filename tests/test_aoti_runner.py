"""The AOTI check reads ExecuTorch 1.5's per-weight layout: the delegate's `ETCUDAFQN3` metadata decoded, each
weight viewed over its storage as recorded."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "orchestrator" / "exporters"))
import aoti_runner  # noqa: E402

# Made by ExecuTorch 1.5.1's own `encode_cuda_weight_metadata` (backends/cuda/cuda_weight_collector.py) for a
# float32 2x2 view (offset 1, strides (1, 3)) on CUDA and an int64 scalar constant on the CPU.
ET151_METADATA = bytes.fromhex(
    "45544355444146514e330c000000616231325f736f5f626c6f620200000008000000706f6c6963792e771d000000637564615f66716e"
    "5f7765696768743a637564613a706f6c6963792e77180000000000000006000000010000000100000000000000020000000200000000"
    "000000020000000000000001000000000000000300000000000000110000005f74656e736f725f636f6e7374616e743032000000637564"
    "615f66716e5f7765696768743a6370753a616231325f736f5f626c6f623a5f74656e736f725f636f6e7374616e74300800000000000000"
    "0400000000000000000000000000000000000000"
)


def test_metadata_written_by_executorch_1_5_decodes_to_its_weights() -> None:
    so_key, entries = aoti_runner.decode_fqn_metadata(ET151_METADATA)
    assert so_key == "ab12_so_blob"
    assert entries == [
        ("policy.w", "cuda_fqn_weight:cuda:policy.w", 24, 6, 1, 1, (2, 2), (1, 3)),
        ("_tensor_constant0", "cuda_fqn_weight:cpu:ab12_so_blob:_tensor_constant0", 8, 4, 0, 0, (), ()),
    ]


def test_truncated_or_padded_metadata_is_refused() -> None:
    with pytest.raises(RuntimeError, match="3 bytes left over"):
        aoti_runner.decode_fqn_metadata(ET151_METADATA + b"\0\0\0")
    with pytest.raises(Exception):  # noqa: B017 - struct.error or a decode error, either way not silently short
        aoti_runner.decode_fqn_metadata(ET151_METADATA[:40])


def test_a_weight_is_viewed_over_its_storage_with_offset_and_strides() -> None:
    torch = pytest.importorskip("torch")
    storage = torch.arange(6, dtype=torch.float32)
    weight = aoti_runner.FqnConstant("policy.w", storage.numpy().tobytes(), 6, 0, 1, (2, 2), (1, 3))
    tensor = aoti_runner.constant_tensor(weight, "cpu")
    assert tensor.dtype == torch.float32
    assert torch.equal(tensor, storage.as_strided((2, 2), (1, 3), 1))
    bad = aoti_runner.FqnConstant("policy.q", b"\0" * 4, 99, 0, 0, (1,), (1,))
    with pytest.raises(RuntimeError, match="policy.q: ScalarType 99 is not one of"):
        aoti_runner.constant_tensor(bad, "cpu")
