#!/usr/bin/python3
"""Write hostile ONNX models: well-formed protobufs whose numbers or structure once made the
compiler crash, hang or overflow (huge fixed batch dims, convolutions with zero strides or
dilations, negative pads or a kernel larger than the input, model-local functions that call
themselves), plus models that are merely large (a Sum of 5000 inputs, a chain of 20000 ops).

usage: make_hostile_onnx.py --out DIR
Run with /usr/bin/python3 (the interpreter that has onnx).
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
INT64_MAX = 2**63 - 1


def save(model, path, check=True):
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, path)


def make_model(nodes, inputs, outputs, initializers=(), functions=(), extra_opsets=()):
    graph = helper.make_graph(nodes, "hostile", inputs=inputs, outputs=outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", OPSET)] + list(extra_opsets)
    return helper.make_model(graph, producer_name="make_hostile_onnx", opset_imports=opsets, functions=list(functions))


def fixed_batch_model(batch):
    """y = x @ w with x of a fixed [batch, 8]."""
    w = numpy_helper.from_array(np.ones((8, 4), dtype=np.float32), "w")
    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])], [w])


def conv_model(input_hw=8, kernel=3, **attrs):
    """A Conv of a symbolic batch of [3, H, W] images with 4 filters and the given attributes."""
    w = numpy_helper.from_array(np.ones((4, 3, kernel, kernel), dtype=np.float32), "w")
    return make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, input_hw, input_hw])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "h", "w"])], [w])


def function_model(calls):
    """x -> F(x) -> y, where each model-local function f in `calls` calls calls[f] (a cycle)."""
    functions = []
    for name, callee in calls.items():
        body = [helper.make_node("Relu", ["a"], ["r"]), helper.make_node(callee, ["r"], ["b"], domain="local")]
        functions.append(helper.make_function("local", name, ["a"], ["b"], body,
                                              opset_imports=[helper.make_opsetid("", OPSET),
                                                             helper.make_opsetid("local", 1)]))
    first = next(iter(calls))
    return make_model([helper.make_node(first, ["x"], ["y"], name="call", domain="local")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
                      functions=functions, extra_opsets=[helper.make_opsetid("local", 1)])


def sum_model(count):
    """y = Sum(x * w, x * w, ...) of `count` inputs: one op, very wide."""
    w = numpy_helper.from_array(np.full((8,), 0.5, dtype=np.float32), "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"], name="scale"),
             helper.make_node("Sum", ["xw"] * count, ["y"], name="sum")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], [w])


def chain_model(length):
    """x * w, then `length` ops in a row (Add of a constant and Tanh in turn): a very deep graph."""
    w = numpy_helper.from_array(np.full((8,), 0.5, dtype=np.float32), "w")
    c = numpy_helper.from_array(np.array(0.001, dtype=np.float32), "c")
    nodes = [helper.make_node("Mul", ["x", "w"], ["v0"], name="scale")]
    for i in range(length):
        op = ["Add", ["v%d" % i, "c"]] if i % 2 == 0 else ["Tanh", ["v%d" % i]]
        out = "y" if i == length - 1 else "v%d" % (i + 1)
        nodes.append(helper.make_node(op[0], op[1], [out], name="op%d" % i))
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], [w, c])


def write_all(out_dir):
    def path(name):
        return os.path.join(out_dir, name)

    # The checker itself accepts these: the trouble is in the numbers.
    save(fixed_batch_model(2**40), path("fixed_batch_2p40.onnx"))
    save(fixed_batch_model(INT64_MAX), path("fixed_batch_int64max.onnx"))
    save(fixed_batch_model(2), path("fixed_batch_2.onnx"))
    # The checker does not look at attribute values; shape inference divides by them.
    save(conv_model(strides=[0, 0]), path("conv_stride0.onnx"), check=False)
    save(conv_model(dilations=[0, 0]), path("conv_dilation0.onnx"), check=False)
    save(conv_model(pads=[-2, -2, -2, -2]), path("conv_negative_pads.onnx"), check=False)
    save(conv_model(input_hw=3, kernel=5), path("conv_kernel_too_large.onnx"), check=False)
    save(function_model({"F": "F"}), path("function_calls_itself.onnx"), check=False)
    save(function_model({"F": "G", "G": "F"}), path("functions_call_each_other.onnx"), check=False)
    save(sum_model(5000), path("sum_5000.onnx"))
    save(chain_model(20000), path("chain_20000.onnx"))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    write_all(args.out)
    print("wrote hostile ONNX models to %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
