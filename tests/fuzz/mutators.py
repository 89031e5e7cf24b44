"""Mutations of the fuzzer's seed files: bytes, JSON trees, ONNX protobufs and TorchScript zips.

Every function takes a random.Random and is deterministic given its state. Mutators return the
new file content (bytes) and a short description of what they did.
"""
import io
import json
import warnings
import zipfile

# ---------------------------------------------------------------------------------------------
# Bytes
# ---------------------------------------------------------------------------------------------

INTERESTING_BYTES = [0x00, 0xFF, 0x7F, 0x80, 0x01, 0x20, 0x22, 0x5B, 0x7B, 0x30, 0x2D]


def flip_bits(rng, data):
    data = bytearray(data)
    n = rng.choice([1, 2, 4, 16])
    for _ in range(n):
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
    return bytes(data), "flip %d bits" % n


def set_bytes(rng, data):
    data = bytearray(data)
    n = rng.choice([1, 3, 8])
    for _ in range(n):
        data[rng.randrange(len(data))] = rng.choice(INTERESTING_BYTES)
    return bytes(data), "set %d bytes" % n


def truncate(rng, data):
    cut = rng.choice([0, 1, len(data) // 2, rng.randrange(len(data)), len(data) - 1])
    return data[:cut], "truncate to %d of %d bytes" % (cut, len(data))


def delete_chunk(rng, data):
    start = rng.randrange(len(data))
    length = rng.choice([1, 8, 64, 512, len(data) // 4 + 1])
    return data[:start] + data[start + length:], "delete %d bytes at %d" % (length, start)


def duplicate_chunk(rng, data):
    start = rng.randrange(len(data))
    length = rng.choice([1, 8, 64, 512, len(data) // 4 + 1])
    chunk = data[start:start + length]
    at = rng.randrange(len(data) + 1)
    times = rng.choice([1, 1, 2, 50])
    return data[:at] + chunk * times + data[at:], "duplicate %d bytes from %d at %d x%d" % (len(chunk), start, at, times)


def insert_random(rng, data):
    at = rng.randrange(len(data) + 1)
    chunk = bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 32])))
    return data[:at] + chunk + data[at:], "insert %d random bytes at %d" % (len(chunk), at)


def splice_chunk(rng, data):
    a, b = rng.randrange(len(data)), rng.randrange(len(data))
    length = rng.choice([4, 32, 256])
    chunk = data[b:b + length]
    return data[:a] + chunk + data[a + len(chunk):], "overwrite %d bytes at %d with bytes from %d" % (len(chunk), a, b)


BYTE_MUTATORS = [flip_bits, set_bytes, truncate, delete_chunk, duplicate_chunk, insert_random, splice_chunk]


def mutate_bytes(rng, data):
    if not data:
        return b"\x00", "a NUL byte for an empty file"
    return rng.choice(BYTE_MUTATORS)(rng, data)


# ---------------------------------------------------------------------------------------------
# JSON trees
# ---------------------------------------------------------------------------------------------

class Raw:
    """A JSON token written verbatim (NaN, 1e999, deep nesting): not expressible in Python json."""

    def __init__(self, text, label):
        self.text = text
        self.label = label


def deep_array(depth):
    return Raw("[" * depth + "]" * depth, "[[...]] %d deep" % depth)


def deep_object(depth):
    return Raw('{"a":' * depth + "1" + "}" * depth, '{"a":{"a":...}} %d deep' % depth)


INTERESTING_VALUES = [
    1e308, -1e308, 1.7976931348623157e308, 5e-324, -1, 0, -0.0, 1, 0.5, 2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 53 + 1,
    2 ** 63 - 1, 2 ** 63, 2 ** 64, -(2 ** 63), -(2 ** 63) - 1, 10 ** 30, "", "x", "-1", "1e308", "NaN", "80G", "-4G",
    "99999999999999999999G", "0", "\u0000", Raw('"\udcff\udcfe"', "invalid UTF-8 bytes"), None, True,
    False, [], {}, [None], {"": None}, "stage_0.pt", "../../../../etc/passwd", "/dev/zero", "/proc/self/mem",
]


def interesting_value(rng):
    roll = rng.random()
    if roll < 0.08:
        return Raw(rng.choice(["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" * 400, "0x10", "01", "1.",
                               ".5", "+1", "1e-99999", "\"\\ud800\"", "\"\\u0000\""]), "raw token")
    if roll < 0.14:
        return rng.choice([deep_array, deep_object])(rng.choice([64, 1000, 10000, 100000]))
    if roll < 0.18:
        return "x" * rng.choice([1000, 100000, 3000000])
    if roll < 0.20:
        return [0] * rng.choice([1000, 100000])
    return rng.choice(INTERESTING_VALUES)


def all_paths(tree, prefix=()):
    """Every path to a value in a JSON tree (lists of keys/indices), the root excluded."""
    paths = []
    if isinstance(tree, dict):
        for key, value in tree.items():
            paths.append(prefix + (key,))
            paths.extend(all_paths(value, prefix + (key,)))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            paths.append(prefix + (i,))
            paths.extend(all_paths(value, prefix + (i,)))
    return paths


def get_at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def wrong_type(value, rng):
    if isinstance(value, bool):
        return rng.choice([1, "true", None])
    if isinstance(value, (int, float)):
        return rng.choice([str(value), [value], {"value": value}, True, None])
    if isinstance(value, str):
        return rng.choice([0, 1.5, [value], {value: value}, None, True])
    if isinstance(value, list):
        return rng.choice([{}, {"0": value[0] if value else 0}, "[]", 0, None])
    if isinstance(value, dict):
        return rng.choice([[], list(value.values()), "{}", 0, None])
    return rng.choice(["null", 0, []])


def numeric_neighbour(value, rng):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return interesting_value(rng)
    return rng.choice([value + 1, value - 1, -value, value * 2, value * 1000003, 0, -1, value / 3 if value else 0.1,
                       value * 1e300, 2 ** 62 + value])


def mutate_json_tree(rng, tree):
    """One structural mutation of a parsed JSON tree, in place where possible; returns (tree, what)."""
    paths = all_paths(tree)
    if not paths:
        return interesting_value(rng), "root replaced"
    path = rng.choice(paths)
    parent = get_at(tree, path[:-1])
    key = path[-1]
    where = "/".join(str(p) for p in path)
    value = parent[key]
    roll = rng.random()
    if roll < 0.30:
        new = interesting_value(rng)
        parent[key] = new
        return tree, "%s := %s" % (where, describe(new))
    if roll < 0.45:
        new = numeric_neighbour(value, rng)
        parent[key] = new
        return tree, "%s := %s" % (where, describe(new))
    if roll < 0.60:
        new = wrong_type(value, rng)
        parent[key] = new
        return tree, "%s := %s (wrong type)" % (where, describe(new))
    if roll < 0.75:
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
        return tree, "%s removed" % where
    if roll < 0.82:
        if isinstance(parent, list):
            parent.insert(key, json.loads(json.dumps(value)))
            return tree, "%s duplicated" % where
        parent[key + "_extra"] = value
        return tree, "%s_extra added" % where
    if roll < 0.88 and isinstance(value, (list, dict)):
        parent[key] = [] if isinstance(value, list) else {}
        return tree, "%s emptied" % where
    if roll < 0.94:
        other = rng.choice(paths)
        try:
            other_value = get_at(tree, other)
            parent[key] = json.loads(json.dumps(other_value)) if not isinstance(other_value, Raw) else other_value
            return tree, "%s := value of %s" % (where, "/".join(str(p) for p in other))
        except (KeyError, IndexError, TypeError):
            pass
    depth = rng.choice([1000, 100000])
    parent[key] = rng.choice([deep_array, deep_object])(depth)
    return tree, "%s := nesting %d deep" % (where, depth)


def describe(value):
    if isinstance(value, Raw):
        return value.label if len(value.text) > 40 else value.text
    text = json.dumps(value)
    return text if len(text) <= 40 else "%s... (%d chars)" % (text[:20], len(text))


def dump_json(tree):
    """Serializes a tree that may hold Raw tokens."""
    raws = []

    def replace(value):
        if isinstance(value, Raw):
            raws.append(value.text)
            return "@@RAW%d@@" % (len(raws) - 1)
        if isinstance(value, dict):
            return {k: replace(v) for k, v in value.items()}
        if isinstance(value, list):
            return [replace(v) for v in value]
        return value

    text = json.dumps(replace(tree), indent=1)
    for i, raw in enumerate(raws):
        text = text.replace('"@@RAW%d@@"' % i, raw)
    return text.encode("utf-8", "surrogateescape")


def mutate_json(rng, data):
    """JSON-aware mutations (1 to 3), sometimes followed by a byte mutation."""
    tree = json.loads(data)
    what = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        try:
            tree, step = mutate_json_tree(rng, tree)
        except (IndexError, KeyError, TypeError, AttributeError) as e:  # e.g. below a value already replaced
            step = "mutation not applicable (%s)" % type(e).__name__
        what.append(step)
    out = dump_json(tree)
    if rng.random() < 0.1:
        out, step = mutate_bytes(rng, out)
        what.append(step)
    return out, "; ".join(what)


# ---------------------------------------------------------------------------------------------
# ONNX models
# ---------------------------------------------------------------------------------------------

INT64_MAX = 2 ** 63 - 1
# In a description: this mutation alone makes the input invalid, so exit 0 is silent acceptance.
INVALID = "[invalid]"
MUST_FAIL = "[must fail]"  # the only structured mutation of a case was an invalid one
HUGE_DIMS = [0, -1, -7, 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 + 1, 2 ** 40, 2 ** 62, INT64_MAX]


def _onnx():
    import onnx
    from onnx import helper
    return onnx, helper


def onnx_set_input_dim(rng, model):
    value = rng.choice(list(model.graph.input))
    dims = value.type.tensor_type.shape.dim
    if not dims:
        return "input %s has no dims" % value.name
    i = rng.randrange(len(dims))
    if rng.random() < 0.85:
        dims[i].dim_value = rng.choice(HUGE_DIMS)
        return "input %s dim %d := %d" % (value.name, i, dims[i].dim_value)
    dims[i].dim_param = rng.choice(["", "?", "batch", "seq" * 1000])
    return "input %s dim %d := '%s'" % (value.name, i, dims[i].dim_param[:20])


def onnx_input_rank(rng, model):
    value = rng.choice(list(model.graph.input))
    shape = value.type.tensor_type.shape
    if rng.random() < 0.5 and shape.dim:
        del shape.dim[-1]
        return "input %s loses its last dim" % value.name
    for _ in range(rng.choice([1, 5, 60])):
        shape.dim.add().dim_value = rng.choice([1, 2, 0])
    return "input %s gains dims" % value.name


def onnx_input_dtype(rng, model):
    value = rng.choice(list(model.graph.input))
    value.type.tensor_type.elem_type = rng.choice([0, 2, 7, 8, 9, 10, 16, 14, 999])
    return "input %s elem_type := %d" % (value.name, value.type.tensor_type.elem_type)


def onnx_initializer_dims(rng, model):
    if not model.graph.initializer:
        return "no initializer"
    t = rng.choice(list(model.graph.initializer))
    if not t.dims:
        t.dims.append(1)
        return "initializer %s gains a dim" % t.name
    i = rng.randrange(len(t.dims))
    t.dims[i] = rng.choice(HUGE_DIMS + [t.dims[i] * 2, t.dims[i] + 1])
    return "initializer %s dim %d := %d" % (t.name, i, t.dims[i])


def onnx_initializer_data(rng, model):
    if not model.graph.initializer:
        return "no initializer"
    t = rng.choice(list(model.graph.initializer))
    roll = rng.random()
    if roll < 0.4 and t.raw_data:
        t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data))]
        return "initializer %s raw_data truncated %s" % (t.name, INVALID)
    if roll < 0.6:
        t.data_type = rng.choice([0, 8, 16, 11, 999])
        return "initializer %s data_type := %d" % (t.name, t.data_type)
    if roll < 0.8:
        t.data_location = 1  # EXTERNAL
        del t.external_data[:]
        entry = t.external_data.add()
        entry.key = "location"
        entry.value = rng.choice(["/dev/zero", "../../etc/passwd", "missing.bin", "", "/proc/self/mem"])
        if rng.random() < 0.5:
            entry = t.external_data.add()
            entry.key = "length"
            entry.value = str(rng.choice([-1, 2 ** 62, 10]))
        return "initializer %s external data at %s" % (t.name, t.external_data[0].value)
    t.raw_data = t.raw_data + b"\x00" * rng.choice([1, 3, 4096])
    return "initializer %s raw_data too long %s" % (t.name, INVALID)


def onnx_remove_initializer(rng, model):
    if not model.graph.initializer:
        return "no initializer"
    i = rng.randrange(len(model.graph.initializer))
    name = model.graph.initializer[i].name
    del model.graph.initializer[i]
    return "initializer %s removed" % name


def onnx_node_inputs(rng, model):
    node = rng.choice(list(model.graph.node))
    roll = rng.random()
    if roll < 0.35 and node.input:
        i = rng.randrange(len(node.input))
        del node.input[i]
        return "node %s loses input %d" % (node.name, i)
    if roll < 0.55:
        node.input.append(rng.choice(["nowhere", "", "x", node.output[0] if node.output else "y"]))
        return "node %s gains input %s" % (node.name, node.input[-1])
    if roll < 0.75 and node.input:
        node.input[rng.randrange(len(node.input))] = rng.choice(["undefined", node.output[0] if node.output else "z"])
        return "node %s reads an undefined or its own output" % node.name
    if node.output:
        node.output[0] = rng.choice(["x", model.graph.output[0].name, "", "dup"])
        return "node %s output renamed to %s" % (node.name, node.output[0])
    return "node %s unchanged" % node.name


def onnx_op_type(rng, model):
    node = rng.choice(list(model.graph.node))
    node.op_type = rng.choice(["Relu", "Conv", "Gemm", "MatMul", "Sum", "Reshape", "Loop", "If", "Mystery", "",
                               "Softmax", "Concat", "Split", "Transpose", "Gather", "Expand", "Tile", "Pad",
                               "MaxPool", "BatchNormalization", "LayerNormalization"])
    return "node %s op := %s" % (node.name, node.op_type)


def onnx_attributes(rng, model):
    onnx, helper = _onnx()
    node = rng.choice(list(model.graph.node))
    roll = rng.random()
    if roll < 0.5 and node.attribute:
        attr = rng.choice(list(node.attribute))
        if attr.ints:
            for i in range(len(attr.ints)):
                attr.ints[i] = rng.choice([0, -1, -(2 ** 40), 2 ** 40, INT64_MAX, attr.ints[i]])
            if rng.random() < 0.3:
                attr.ints.append(1)
            return "node %s attribute %s := %s" % (node.name, attr.name, list(attr.ints))
        if attr.type == onnx.AttributeProto.INT:
            attr.i = rng.choice([0, -1, 7, 2 ** 40, INT64_MAX, -(2 ** 63)])
            return "node %s attribute %s := %d" % (node.name, attr.name, attr.i)
        if attr.type == onnx.AttributeProto.FLOAT:
            attr.f = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e38])
            return "node %s attribute %s := %r" % (node.name, attr.name, attr.f)
        attr.type = rng.choice([1, 2, 3, 7, 99])
        return "node %s attribute %s type := %d" % (node.name, attr.name, attr.type)
    name, value = rng.choice([("strides", [0, 0]), ("strides", [-1, 1]), ("kernel_shape", [0, 0]),
                              ("kernel_shape", [2 ** 40, 1]), ("pads", [-5, -5, -5, -5]), ("pads", [2 ** 40] * 4),
                              ("dilations", [0, 0]), ("group", 0), ("group", 7), ("axis", 100), ("axis", -100),
                              ("transB", 7), ("alpha", float("nan")), ("perm", [5, 0]), ("auto_pad", "WRONG"),
                              ("auto_pad", "SAME_UPPER"), ("epsilon", -1.0)])
    for i, attr in enumerate(node.attribute):
        if attr.name == name:
            del node.attribute[i]
            break
    node.attribute.append(helper.make_attribute(name, value))
    invalid = node.op_type == "Conv" and (name in ("strides", "dilations", "kernel_shape") and min(value) <= 0 or
                                          name == "group" and value == 0)
    return "node %s attribute %s := %r%s" % (node.name, name, value, " " + INVALID if invalid else "")


def onnx_graph_structure(rng, model):
    nodes = model.graph.node
    roll = rng.random()
    if roll < 0.3 and len(nodes) > 1:
        i = rng.randrange(len(nodes))
        name = nodes[i].name
        del nodes[i]
        return "node %s removed" % name
    if roll < 0.5:
        i = rng.randrange(len(nodes))
        copy = type(nodes[i])()
        copy.CopyFrom(nodes[i])
        nodes.insert(rng.randrange(len(nodes) + 1), copy)
        return "node %s duplicated (two producers)" % nodes[i].name
    if roll < 0.65 and len(nodes) > 1:
        i, j = rng.sample(range(len(nodes)), 2)
        a, b = type(nodes[i])(), type(nodes[j])()
        a.CopyFrom(nodes[i])
        b.CopyFrom(nodes[j])
        nodes[i].CopyFrom(b)
        nodes[j].CopyFrom(a)
        return "nodes %d and %d swapped (not topological)" % (i, j)
    if roll < 0.8:
        if rng.random() < 0.5:
            del model.graph.output[:]
            return "graph outputs removed"
        model.graph.output[0].name = "nonexistent"
        return "graph output renamed to nonexistent"
    if roll < 0.9:
        del model.graph.input[:]
        return "graph inputs removed"
    # A cycle: the first node reads the last node's output.
    nodes[0].input.append(nodes[-1].output[0])
    return "cycle through node %s" % nodes[0].name


def onnx_opset(rng, model):
    roll = rng.random()
    if roll < 0.4:
        model.opset_import[0].version = rng.choice([1, 6, 9, 10000, -1])
        return "opset := %d" % model.opset_import[0].version
    if roll < 0.6:
        del model.opset_import[:]
        return "no opset import"
    if roll < 0.8:
        model.ir_version = rng.choice([0, 1, 99, -1])
        return "ir_version := %d" % model.ir_version
    model.opset_import[0].domain = "ai.unknown"
    return "opset domain := ai.unknown"


def _first_node_output(model, op_types):
    for node in model.graph.node:
        if node.op_type in op_types:
            return node
    return model.graph.node[0]


def onnx_sum_fan_in(rng, model):
    """Replace a Relu by Sum of n copies of its input (same shapes, so still valid)."""
    onnx, helper = _onnx()
    node = _first_node_output(model, ("Relu",))
    n = rng.choice([2, 500, 2000, 5000])
    node.op_type = "Sum"
    source = node.input[0]
    del node.input[:]
    node.input.extend([source] * n)
    return "Sum of %d inputs" % n


def onnx_long_chain(rng, model):
    """Insert n Relu/Neg ops after the first Relu (a valid, long model)."""
    onnx, helper = _onnx()
    node = _first_node_output(model, ("Relu",))
    n = rng.choice([100, 1000, 3000])
    out = node.output[0]
    node.output[0] = out + "_chain0"
    index = list(model.graph.node).index(node)
    new = []
    for i in range(n):
        op = rng.choice(["Relu", "Neg", "Identity", "Sigmoid"])
        target = out if i == n - 1 else "%s_chain%d" % (out, i + 1)
        new.append(helper.make_node(op, ["%s_chain%d" % (out, i)], [target], name="chain%d" % i))
    for offset, n_node in enumerate(new):
        model.graph.node.insert(index + 1 + offset, n_node)
    return "chain of %d ops" % n


def onnx_local_function(rng, model):
    """A model-local function that calls itself (or a pair that call each other), used by a node."""
    onnx, helper = _onnx()
    domain = "rannc.fuzz"
    mutual = rng.random() < 0.4
    if mutual:
        f = helper.make_function(domain, "F", ["a"], ["b"], [helper.make_node("G", ["a"], ["b"], domain=domain)],
                                 [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])
        g = helper.make_function(domain, "G", ["a"], ["b"], [helper.make_node("F", ["a"], ["b"], domain=domain)],
                                 [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])
        model.functions.extend([f, g])
    else:
        body = [helper.make_node("Relu", ["a"], ["t"]), helper.make_node("F", ["t"], ["b"], domain=domain)]
        if rng.random() < 0.3:
            body = [helper.make_node("F", ["a", "a", "a"], ["b"], domain=domain)]  # wrong arity too
        model.functions.append(helper.make_function(domain, "F", ["a"], ["b"], body,
                                                    [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]))
    model.opset_import.append(helper.make_opsetid(domain, 1))
    node = _first_node_output(model, ("Relu",))
    node.op_type = "F"
    node.domain = domain
    return "local function %s %s" % ("F<->G mutual recursion" if mutual else "F calls itself", INVALID)


ONNX_MUTATORS = [onnx_set_input_dim, onnx_set_input_dim, onnx_input_rank, onnx_input_dtype, onnx_initializer_dims,
                 onnx_initializer_data, onnx_remove_initializer, onnx_node_inputs, onnx_op_type, onnx_attributes,
                 onnx_attributes, onnx_graph_structure, onnx_opset, onnx_sum_fan_in, onnx_long_chain,
                 onnx_local_function]


def mutate_onnx(rng, data):
    onnx, _ = _onnx()
    model = onnx.ModelProto()
    model.ParseFromString(data)
    what = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        mutator = rng.choice(ONNX_MUTATORS)
        try:
            what.append(mutator(rng, model))
        except (IndexError, ValueError, TypeError, AttributeError) as e:  # nothing left to mutate that way
            what.append("%s not applicable (%s)" % (mutator.__name__, type(e).__name__))
    if len(what) == 1 and INVALID in what[0]:
        what[0] += " " + MUST_FAIL
    out = model.SerializeToString()
    if rng.random() < 0.12:
        out, step = mutate_bytes(rng, out)
        what.append(step)
    return out, "; ".join(what)


# ---------------------------------------------------------------------------------------------
# TorchScript zip archives
# ---------------------------------------------------------------------------------------------

def read_zip(data):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(info.filename, z.read(info.filename)) for info in z.infolist()]


def write_zip(entries):
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        warnings.simplefilter("ignore")  # duplicate names are on purpose
        for name, content in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            z.writestr(info, content)
    return buffer.getvalue()


def pt_storage(rng, entries):
    storages = [i for i, (name, _) in enumerate(entries) if "/data/" in name and not name.endswith("/")]
    if not storages:
        return entries, "no storage"
    i = rng.choice(storages)
    name, content = entries[i]
    roll = rng.random()
    if roll < 0.35:
        entries[i] = (name, b"")
        return entries, "%s emptied %s" % (name, INVALID)
    if roll < 0.75:
        cut = rng.choice([1, 3, len(content) // 2, len(content) - 1])
        entries[i] = (name, content[:cut])
        return entries, "%s truncated to %d of %d bytes %s" % (name, cut, len(content), INVALID)
    if roll < 0.85:
        del entries[i]
        return entries, "%s removed %s" % (name, INVALID)
    entries[i] = (name, content + b"\x00" * 4096)
    return entries, "%s extended" % name


def pt_pickle(rng, entries):
    pickles = [i for i, (name, _) in enumerate(entries) if name.endswith(".pkl")]
    i = rng.choice(pickles)
    name, content = entries[i]
    roll = rng.random()
    if roll < 0.6:
        content, what = mutate_bytes(rng, content)
    elif roll < 0.8:
        content, what = b"\x80\x02X\x05\x00\x00\x00hello.", "a pickle of a string"
    else:
        content, what = b"", "emptied"
    entries[i] = (name, content)
    return entries, "%s: %s" % (name, what)


def pt_code(rng, entries):
    code = [i for i, (name, _) in enumerate(entries) if name.endswith(".py")]
    if not code:
        return entries, "no code"
    i = rng.choice(code)
    name, content = entries[i]
    text = content.decode("utf-8", "replace")
    roll = rng.random()
    if roll < 0.3:
        text = text.replace("torch.linear", "torch.nonexistent_op", 1).replace("torch.relu", "torch.ops.x.y", 1)
        what = "ops renamed"
    elif roll < 0.5:
        text = text + "\ndef broken(:\n"
        what = "syntax error"
    elif roll < 0.7:
        text = text.replace("return", "return return", 1)
        what = "bad return"
    elif roll < 0.85:
        lines = text.splitlines()
        if lines:
            del lines[rng.randrange(len(lines))]
        text = "\n".join(lines)
        what = "a line deleted"
    else:
        raw, what = mutate_bytes(rng, content)
        entries[i] = (name, raw)
        return entries, "%s: %s" % (name, what)
    entries[i] = (name, text.encode("utf-8"))
    return entries, "%s: %s" % (name, what)


def pt_archive(rng, entries):
    roll = rng.random()
    if roll < 0.3:
        versions = [i for i, (name, _) in enumerate(entries) if name.endswith("version")]
        for i in versions:
            entries[i] = (entries[i][0], rng.choice([b"999\n", b"", b"-1\n", b"x\n", b"1" * 40]))
        return entries, "version := garbage"
    if roll < 0.55:
        i = rng.randrange(len(entries))
        name = entries[i][0]
        del entries[i]
        return entries, "%s removed" % name
    if roll < 0.75:
        i = rng.randrange(len(entries))
        entries.append(entries[i])
        return entries, "%s duplicated" % entries[i][0]
    if roll < 0.9:
        return [(name.replace("/", "/../", 1) if k == 0 else name, c) for k, (name, c) in enumerate(entries)], \
            "first entry renamed with ../"
    return entries[:1], "only the first entry kept"


PT_MUTATORS = [pt_storage, pt_storage, pt_storage, pt_pickle, pt_pickle, pt_code, pt_archive]


def mutate_pt(rng, data):
    entries = read_zip(data)
    what = []
    for _ in range(rng.choice([1, 1, 2])):
        mutator = rng.choice(PT_MUTATORS)
        try:
            entries, step = mutator(rng, list(entries))
        except (IndexError, ValueError) as e:
            step = "%s not applicable (%s)" % (mutator.__name__, type(e).__name__)
        what.append(step)
    if len(what) == 1 and INVALID in what[0]:
        what[0] += " " + MUST_FAIL
    out = write_zip(entries)
    if rng.random() < 0.1:
        out, step = mutate_bytes(rng, out)
        what.append(step)
    return out, "; ".join(what)
