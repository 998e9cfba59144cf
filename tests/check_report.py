"""Checks the report files in a folder: report.json parses and repeats the preprocessing,
report.html is well-formed (every element closed, in order) and its SVG charts parse as XML,
report.md has the model table. Exit status 0 when all hold.

usage: check_report.py DIR
           the report test_distill_unit writes (its fixture's numbers)
       check_report.py DIR --models NAME,NAME,... [--same EARLIER.json]
           a pipeline's report (Fashion-MNIST): these rows in this order, each with its
           accuracy, size, cost, latency and training figures, and a stage with curves for each;
           with --same, the figures the runner keeps in its manifest (accuracy, training time)
           are those of an earlier report.json, and the measured ones are there again
"""
import html.parser
import json
import math
import re
import sys
import xml.etree.ElementTree as ET


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


def check_html(d, charts):
    text = open(d + "/report.html", encoding="utf-8").read()
    c = Checker()
    c.feed(text)
    c.close()
    assert not c.stack, c.stack
    svgs = re.findall(r"<svg.*?</svg>", text, re.S)
    assert len(svgs) == charts, len(svgs)
    for s in svgs:
        root = ET.fromstring(s)
        assert root.tag.endswith("svg") and root.findall(".//{http://www.w3.org/2000/svg}path")


def check_fixture(d, r):
    models = r["models"]
    assert [m["name"] for m in models] == ["teacher", "student <distilled> & \"quoted\""], models
    assert models[0]["top1"] == 94.5 and models[1]["ort_ms_batch1"] is None, models
    assert models[1]["params"] is None and models[0]["macs"] == 40_000_000, models
    stages = r["stages"]
    assert stages[0]["loss"]["y"][1] is None and len(stages[1]["val_top1"]["x"]) == 3, stages
    check_html(d, 2)
    md = open(d + "/report.md", encoding="utf-8").read()
    assert "| teacher | 94.50% |" in md, md


def positive(m, *keys):
    for k in keys:
        assert isinstance(m[k], (int, float)) and m[k] > 0, (m["name"], k, m[k])


def check_pipeline(d, r, names, earlier):
    models = r["models"]
    assert [m["name"] for m in models] == names, [m["name"] for m in models]
    for m in models:
        assert 0 <= m["top1"] <= m["top5"] <= 100 and m["val_loss"] > 0, m
        positive(m, "params", "macs", "onnx_bytes", "cpu_ms_batch1", "cpu_ms_batch32",
                 "train_seconds", "train_images_per_s")
        if r["onnxruntime"]:
            positive(m, "ort_ms_batch1", "ort_ms_batch32")
        assert m["onnx"].endswith(".onnx") and "/" not in m["onnx"], m
    assert r["validation"]["data"].endswith(".h5"), r["validation"]
    stages = r["stages"]
    assert len(stages) == len(models), stages
    for s in stages:
        assert s["seconds"] > 0 and s["images_per_s"] > 0, s
        assert s["loss"]["x"] and s["val_top1"]["x"], (s["name"], "no curves")
        assert s["loss"]["x"] == sorted(set(s["loss"]["x"])), (s["name"], "steps not rising")
    check_html(d, 2)
    md = open(d + "/report.md", encoding="utf-8").read()
    for m in models:
        assert f"| {m['name']} | {m['top1']:.2f}% |" in md, (m["name"], md)
    if earlier:
        old = json.load(open(earlier, encoding="utf-8"))
        kept = ("top1", "top5", "val_loss", "train_seconds", "train_images_per_s", "params")
        for a, b in zip(old["models"], models):
            for k in kept:
                assert a[k] == b[k], (a["name"], k, a[k], b[k])
        for a, b in zip(old["stages"], stages):
            assert a["seconds"] == b["seconds"], (a["name"], a["seconds"], b["seconds"])


def main(argv):
    d = argv[0]
    r = json.load(open(d + "/report.json", encoding="utf-8"))
    assert r["format"] == "compress.report" and r["format_version"] == 1, r["format"]
    check_preprocessing(r["preprocessing"])
    if "--models" in argv:
        names = argv[argv.index("--models") + 1].split(",")
        earlier = argv[argv.index("--same") + 1] if "--same" in argv else None
        check_pipeline(d, r, names, earlier)
    else:
        check_fixture(d, r)
    print("report files ok")


if __name__ == "__main__":
    main(sys.argv[1:])
