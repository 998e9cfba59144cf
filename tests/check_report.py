"""Checks the report files in a folder: report.json parses and repeats the preprocessing,
report.html is well-formed (every element closed, in order) and its SVG charts parse as XML,
report.md has the model table and the summary line. Each measured number of a model (parameters
total and non-zero, MACs dense and effective, file and gzip size) is computed again here from
its ONNX file with onnx + numpy + gzip, and the summary line is rebuilt from report.json's
numbers. Exit status 0 when all hold.

usage: check_report.py DIR
           the report test_report writes from its fixture (its numbers)
       check_report.py DIR --measured
           the report of test_report's measured models: every number that is there agrees
           with this script's count, and a model that one runtime could not take shows the
           reason in those cells (report.md, report.html) and the message in report.json
       check_report.py DIR --models NAME,NAME,... [--same EARLIER.json]
           a pipeline's report (Fashion-MNIST): these rows in this order, each with its
           accuracy, size, cost, latency and training figures, and a stage with curves for each;
           with --same, the figures the runner keeps in its manifest (accuracy, training time)
           are those of an earlier report.json, and the measured ones are there again
"""
import gzip
import html.parser
import json
import math
import os
import re
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


class Checker(html.parser.HTMLParser):
    void = {"meta", "br", "img", "hr", "input", "link"}

    def __init__(self):
        super().__init__()
        self.stack = []

    def handle_starttag(self, tag, attrs):
        if tag not in self.void:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-4:])
        self.stack.pop()


def check_preprocessing(pre):
    assert pre["layout"] == "NCHW" and pre["channels"] == 1, pre
    assert math.isclose(pre["pixel_scale"], 1 / 255) and math.isclose(pre["mean"][0], 0.286), pre
    assert pre["class_names"][9] == "Ankle boot" and pre["num_classes"] == 10, pre


def check_html(d, charts, models):
    text = open(d + "/report.html", encoding="utf-8").read()
    c = Checker()
    c.feed(text)
    c.close()
    assert not c.stack, c.stack
    svgs = re.findall(r"<svg.*?</svg>", text, re.S)
    assert len(svgs) == charts, len(svgs)
    roots = [ET.fromstring(s) for s in svgs]
    for root in roots:
        assert root.tag.endswith("svg"), root.tag
        assert root.findall(f".//{SVG}path") or root.findall(f".//{SVG}circle"), "an empty chart"
    # the trade-off chart: one labelled point per model with a top-1 and a latency
    runtime = "ort_ms_batch1" if "ONNX Runtime ms" in svgs[0] else "cpu_ms_batch1"
    want = [m["name"] for m in models if m["top1"] is not None and m[runtime] is not None]
    got = [t.text for t in roots[0].findall(f"{SVG}text")[3:]]
    assert "Top-1 against latency" in svgs[0] and got == want, (got, want)
    assert len(roots[0].findall(f"{SVG}circle")) == len(want), svgs[0]
    return text


def xml_text(s):
    """As report.html escapes text (cx_xml_text)."""
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("'", "&#39;")):
        s = s.replace(a, b)
    return "".join(ch for ch in s if ch >= " " or ch in "\n\t")


def md_row(md, name):
    table = md.split("\n## ")[0]  # the models' table, not the stages'
    rows = [line for line in table.splitlines() if line.startswith(f"| {name} |")]
    assert len(rows) == 1, (name, rows)
    return [c.strip() for c in rows[0].strip("|").split("|")]


def check_cells(d, r, md, html_text):
    """A number that is missing because of an error shows the error's reason in its cell (the
    message in the HTML cell's title), and report.json keeps the message."""
    cols = [c for c in r["columns"] if c["header"]]
    header = md_row(md, "model")
    assert header == ["model"] + [c["header"] for c in cols], header
    for m in r["models"]:
        cells = md_row(md, m["name"])
        for c, cell in zip(cols, cells[1:]):
            e = m["errors"].get(c["field"])
            assert m[c["field"]] is None or e is None, (m["name"], c["field"], "value and error")
            if e:
                assert cell == e["reason"] and e["message"], (m["name"], c["field"], cell, e)
                assert xml_text(e["message"]) in html_text, (m["name"], e["message"])
            elif m[c["field"]] is None:
                assert cell == "–", (m["name"], c["field"], cell)


def check_summary(r, md):
    """The sentence rebuilt from the JSON numbers: the last model against the teacher and the
    baseline; nothing missing is printed."""
    s = r["summary"]
    if s is None:
        return
    assert "nan" not in s and "inf" not in s, s
    assert md.index(s) < md.index("| model |"), "the summary is not above the table"
    models = {m["name"]: m for m in r["models"]}
    fin = r["models"][-1]

    def times(ref, f, k):
        a, b = ref[k], f[k]
        return a / b if a and b else None

    def part(ref, every):
        eff = fin["macs_effective"] is not None and ref["macs_effective"] is not None
        mx = times(ref, fin, "macs_effective" if eff else "macs")
        fx = times(ref, fin, "onnx_bytes")
        ort = times(ref, fin, "ort_ms_batch1")
        sx = ort if ort else times(ref, fin, "cpu_ms_batch1")
        where = "ONNX Runtime" if ort else "compress"
        if not every and not any(x and abs(x - 1) >= 0.05 for x in (mx, fx)):
            mx = fx = sx = None
        items = []
        for x, more, less in ((mx, "fewer MACs", "more MACs"), (fx, "smaller file", "larger file"),
                              (sx, f"faster in {where} (batch 1)", f"slower in {where} (batch 1)")):
            if x:
                items.append(f"{x:.1f}x {more}" if x >= 1 else f"{1 / x:.1f}x {less}")
        if fin["top1"] is not None and ref["top1"] is not None:
            items.append(f"{fin['top1'] - ref['top1']:+.2f} points top-1")
        return ", ".join(items) + f" vs {ref['name']}" if items else ""

    parts = []
    for name, every in ((r.get("teacher"), True), (r.get("baseline"), False)):
        if name in models and models[name] is not fin:
            parts.append(part(models[name], every))
    want = f"{fin['name']}: " + "; ".join(p for p in parts if p)
    assert s == want, (s, want)


def file_sizes(path):
    data = open(path, "rb").read()
    return {"onnx_bytes": len(data), "onnx_gzip_bytes": len(gzip.compress(data, compresslevel=9))}


def independent(path):
    """What the report measures, counted here: trainable values as the importer classes them
    (the first use of a float initializer: any input of Conv, Gemm, MatMul; BatchNormalization's
    scale and bias; a non-scalar operand of element-wise arithmetic) and the quantized weights
    of an INT8 file (what its DequantizeLinear nodes read first), Conv/Gemm/MatMul MACs at
    batch 1 from ONNX's own shape inference, and effective MACs: each weight element takes part
    in MACs / its size of them, so only its non-zero elements count."""
    import numpy as np
    import onnx
    from onnx import numpy_helper, shape_inference

    model = shape_inference.infer_shapes(onnx.load(path))
    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    shapes = {}
    for v in list(g.input) + list(g.value_info) + list(g.output):
        dims = v.type.tensor_type.shape.dim
        shapes[v.name] = [d.dim_value if d.HasField("dim_value") else 1 for d in dims]
    for k, a in inits.items():
        shapes[k] = list(a.shape)
    kind = {}
    eltwise = {"Add", "Sub", "Mul", "Div", "Sum", "PRelu"}
    for n in g.node:
        for slot, name in enumerate(n.input):
            if name not in inits or name in kind:
                continue
            a = inits[name]
            if n.op_type == "DequantizeLinear" and slot == 0:
                kind[name] = "param"  # a quantized weight (its scale and zero point are not)
            elif a.dtype.kind != "f":
                kind[name] = "const"
            elif n.op_type == "BatchNormalization":
                kind[name] = "state" if slot >= 3 else "param"
            elif n.op_type in ("Conv", "Gemm", "MatMul") or (n.op_type in eltwise and a.size > 1):
                kind[name] = "param"
            else:
                kind[name] = "const"
    params = [inits[k] for k, v in kind.items() if v == "param"]
    # a weight stored quantized: the initializer behind the DequantizeLinear that makes it
    stored = {n.output[0]: inits[n.input[0]] for n in g.node
              if n.op_type == "DequantizeLinear" and n.input[0] in inits}
    stored.update(inits)
    macs = eff = 0
    for n in g.node:
        if n.op_type not in ("Conv", "Gemm", "MatMul"):
            continue
        a, w, y = shapes[n.input[0]], shapes[n.input[1]], shapes[n.output[0]]
        out = int(np.prod(y))
        if n.op_type == "Conv":
            k = int(np.prod(w)) // w[0]
        elif n.op_type == "Gemm":
            trans_a = any(at.name == "transA" and at.i for at in n.attribute)
            k = a[0] if trans_a else a[1]
        else:
            k = a[-1]
        macs += out * k
        weight = next((stored[i] for i in (n.input[1], n.input[0]) if i in stored), None)
        eff += out * k // weight.size * int(np.count_nonzero(weight)) if weight is not None \
            else out * k
    return {"params": sum(int(p.size) for p in params),
            "params_nonzero": sum(int(np.count_nonzero(p)) for p in params),
            "macs": macs, "macs_effective": eff}


def check_measured_numbers(d, models):
    """Every number the report has agrees with this script's count (a model whose cost the
    report could not measure, because it does not import, is counted for its file only)."""
    try:
        import numpy  # noqa: F401
        import onnx  # noqa: F401
        have_onnx = True
    except ImportError as e:
        print(f"check_report.py: {e}: the cost is not counted again here ({sys.executable})")
        have_onnx = False
    for m in models:
        path = os.path.join(d, m["onnx"])
        want = file_sizes(path)
        if have_onnx and "macs" not in m["errors"]:
            want.update(independent(path))
        for k, v in want.items():
            assert m[k] == v, (m["name"], k, m[k], v)


def check_measured(d, r):
    """test_report's four models: a teacher, a half-zero student, one nobody runs and one with
    an op we lack."""
    models = r["models"]
    assert [m["name"] for m in models] == ["teacher", "student (sparse)",
                                           "student (nobody runs it)", "student (not imported)"]
    md = open(d + "/report.md", encoding="utf-8").read()
    html_text = check_html(d, 1, models)
    check_cells(d, r, md, html_text)
    check_summary(r, md)
    check_measured_numbers(d, models)
    teacher, sparse, nobody, unknown = models
    assert not teacher["errors"] and not sparse["errors"], (teacher["errors"], sparse["errors"])
    assert sparse["macs_effective"] * 2 == sparse["macs"], sparse
    assert sparse["onnx_gzip_bytes"] < sparse["onnx_bytes"], sparse
    cost = ("params", "params_nonzero", "macs", "macs_effective", "cpu_ms_batch1",
            "cpu_ms_batch32")
    for m in (nobody, unknown):
        for k in cost:
            assert m[k] is None and m["errors"][k]["reason"] == "not imported", (m["name"], k)
        assert m["onnx_bytes"] > 0 and m["onnx_gzip_bytes"] > 0, m
    assert "Sinh" in unknown["errors"]["macs"]["message"], unknown["errors"]
    if r["onnxruntime"]:
        assert unknown["ort_ms_batch1"] > 0 and "ort_ms_batch1" not in unknown["errors"], unknown
        assert nobody["errors"]["ort_ms_batch32"]["reason"] == "refused", nobody["errors"]
    assert "| student (not imported) | 87.25% |" in md, md


def check_fixture(d, r):
    models = r["models"]
    assert [m["name"] for m in models] == ["teacher", "student <distilled> & \"quoted\""], models
    assert models[0]["top1"] == 94.5 and models[1]["ort_ms_batch1"] is None, models
    assert models[1]["params"] is None and models[0]["macs"] == 40_000_000, models
    assert models[0]["macs_effective"] == 20_000_000 and models[0]["onnx_gzip_bytes"] is None
    assert models[1]["errors"]["macs"]["reason"] == "not imported", models[1]["errors"]
    stages = r["stages"]
    assert stages[0]["loss"]["y"][1] is None and len(stages[1]["val_top1"]["x"]) == 3, stages
    html_text = check_html(d, 3, models)
    md = open(d + "/report.md", encoding="utf-8").read()
    assert "| teacher | 94.50% |" in md, md
    check_cells(d, r, md, html_text)
    check_summary(r, md)


def positive(m, *keys):
    for k in keys:
        assert isinstance(m[k], (int, float)) and m[k] > 0, (m["name"], k, m[k])


def check_pipeline(d, r, names, earlier):
    models = r["models"]
    assert [m["name"] for m in models] == names, [m["name"] for m in models]
    for m in models:
        assert 0 <= m["top1"] <= m["top5"] <= 100 and m["val_loss"] > 0, m
        positive(m, "params", "params_nonzero", "macs", "macs_effective", "onnx_bytes",
                 "onnx_gzip_bytes", "cpu_ms_batch1", "cpu_ms_batch32", "train_seconds",
                 "train_images_per_s")
        assert not m["errors"], (m["name"], m["errors"])
        if r["onnxruntime"]:
            positive(m, "ort_ms_batch1", "ort_ms_batch32")
            # the same file and images through another runtime: the same predictions; an INT8
            # file runs ORT's integer kernels against ours (docs/quantize.md: on CPUs without
            # VNNI, ORT's u8*s8 pairs saturate), so its two top-1s may differ a little
            tol = 3.0 if "INT8" in m["name"] else 0.05
            assert abs(m["ort_top1"] - m["top1"]) <= tol, (m["name"], m["ort_top1"], m["top1"])
        assert m["onnx"].endswith(".onnx") and "/" not in m["onnx"], m
    assert r["validation"]["data"].endswith(".h5"), r["validation"]
    stages = r["stages"]
    assert len(stages) == len(models), stages
    for s in stages:
        assert s["seconds"] > 0 and s["images_per_s"] > 0, s
        assert s["loss"]["x"] and s["val_top1"]["x"], (s["name"], "no curves")
        assert s["loss"]["x"] == sorted(set(s["loss"]["x"])), (s["name"], "steps not rising")
    html_text = check_html(d, 3, models)
    md = open(d + "/report.md", encoding="utf-8").read()
    check_cells(d, r, md, html_text)
    check_summary(r, md)
    assert r["summary"] and r["summary"].startswith(models[-1]["name"] + ": "), r["summary"]
    check_measured_numbers(d, models)
    for m in models:
        assert f"| {m['name']} | {m['top1']:.2f}% |" in md, (m["name"], md)
    if earlier:
        old = json.load(open(earlier, encoding="utf-8"))
        kept = ("top1", "top5", "val_loss", "train_seconds", "train_images_per_s", "params",
                "params_nonzero", "macs", "macs_effective", "onnx_bytes", "onnx_gzip_bytes")
        for a, b in zip(old["models"], models):
            for k in kept:
                assert a[k] == b[k], (a["name"], k, a[k], b[k])
        for a, b in zip(old["stages"], stages):
            assert a["seconds"] == b["seconds"], (a["name"], a["seconds"], b["seconds"])


def main(argv):
    d = argv[0]
    r = json.load(open(d + "/report.json", encoding="utf-8"))
    assert r["format"] == "compress.report" and r["format_version"] == 1, r["format"]
    if "--measured" not in argv:
        check_preprocessing(r["preprocessing"])
    if "--measured" in argv:
        check_measured(d, r)
    elif "--models" in argv:
        names = argv[argv.index("--models") + 1].split(",")
        earlier = argv[argv.index("--same") + 1] if "--same" in argv else None
        check_pipeline(d, r, names, earlier)
    else:
        check_fixture(d, r)
    print("report files ok")


if __name__ == "__main__":
    main(sys.argv[1:])
