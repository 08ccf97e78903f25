"""onnxruntime's CPU kernels for the row reductions: the peer a CPU user
picks instead (ONNX ``RMSNormalization`` and ``LayerNormalization``, and
onnxruntime's contrib ``SkipSimplifiedLayerNormalization`` /
``SkipLayerNormalization`` for the fused residual forms), each a one-node
model run with its inputs and outputs bound to preallocated torch tensors
(io_binding: no copies, no allocation), on torch's thread count.

Imported by the rows section's probe; onnxruntime and onnx are optional
(``ci/requirements-bench.txt``): without them the peer is not measured.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

# entry name -> (ONNX op, domain, parameter input names): the plain forms.
PLAIN = {
    "rms_norm": ("RMSNormalization", "", ("scale",)),
    "layer_norm": ("LayerNormalization", "", ("scale", "bias")),
}
# entry name -> (op, domain): the fused residual forms (outputs y and x + skip).
FUSED = {
    "rms_norm": ("SkipSimplifiedLayerNormalization", "com.microsoft"),
    "layer_norm": ("SkipLayerNormalization", "com.microsoft"),
}


def available() -> bool:
    try:
        _ort()
        _onnx()
    except ImportError:
        return False
    return True


# Imported by name: neither ships type information, and both are optional.
def _ort() -> Any:
    return importlib.import_module("onnxruntime")


def _onnx() -> Any:
    return importlib.import_module("onnx")


def _session(
    node_op: str,
    domain: str,
    inputs: list[tuple[str, Any]],
    outputs: list[str],
    eps: float,
    threads: int,
    axis: bool,
) -> Any:
    ort, onnx = _ort(), _onnx()
    TensorProto, helper = onnx.TensorProto, onnx.helper

    elem = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}
    dtype = str(inputs[0][1].dtype).removeprefix("torch.")
    ins = [helper.make_tensor_value_info(n, elem[dtype], list(t.shape)) for n, t in inputs]
    outs = [helper.make_tensor_value_info(o, elem[dtype], None) for o in outputs if o]
    attrs = {"epsilon": eps, **({"axis": -1} if axis else {})}
    node = helper.make_node(node_op, [n for n, _ in inputs], outputs, domain=domain, **attrs)
    opsets = [helper.make_opsetid("", 23)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(helper.make_graph([node], "peer", ins, outs), opset_imports=opsets)
    model.ir_version = 10
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _bound(sess: Any, inputs: list[tuple[str, Any]], outputs: dict[str, Any]) -> Callable[[], None]:
    import numpy as np

    np_dtype = {"float32": np.float32, "float16": np.float16}
    binding = sess.io_binding()
    for name, t in inputs:
        binding.bind_input(
            name, "cpu", 0, np_dtype[str(t.dtype).removeprefix("torch.")], list(t.shape), t.data_ptr()
        )
    for name, t in outputs.items():
        binding.bind_output(
            name, "cpu", 0, np_dtype[str(t.dtype).removeprefix("torch.")], list(t.shape), t.data_ptr()
        )

    keep = (inputs, outputs)  # the binding holds raw pointers: the runner keeps their tensors alive

    def run() -> None:
        sess.run_with_iobinding(binding)
        assert keep

    return run


def plain(
    name: str, x: Any, params: list[Any], eps: float, threads: int
) -> tuple[Callable[[], None], Any] | None:
    """A runner of `name`'s plain form over x and its parameters (every one
    present), writing into a preallocated tensor it returns; None where
    onnxruntime has no such kernel for x's dtype."""
    if name not in PLAIN:
        return None
    op, domain, names = PLAIN[name]
    inputs = [("x", x), *zip(names, params)]
    y = x.new_empty(x.shape)
    try:
        return _bound(_session(op, domain, inputs, ["y"], eps, threads, axis=True), inputs, {"y": y}), y
    except Exception:
        return None


def fused(
    name: str, x: Any, residual: Any, params: list[Any], eps: float, threads: int
) -> tuple[Callable[[], None], Any, Any] | None:
    """A runner of `name`'s fused residual form: y = norm(x + residual) and
    h = x + residual, both into preallocated tensors it returns."""
    if name not in FUSED:
        return None
    op, domain = FUSED[name]
    names = ("gamma", "beta")[: len(params)]
    inputs = [("x", x), ("skip", residual), *zip(names, params)]
    y, h = x.new_empty(x.shape), x.new_empty(x.shape)
    try:
        sess = _session(op, domain, inputs, ["y", "", "", "h"], eps, threads, axis=False)
        return _bound(sess, inputs, {"y": y, "h": h}), y, h
    except Exception:
        return None
