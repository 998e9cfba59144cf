"""Checks the files cx_report_write made in the folder argv[1]: report.json parses and repeats the
preprocessing, report.html is well-formed (every element closed, in order) and its SVG charts parse
as XML, report.md has the model table. Exit status 0 when all hold."""
import html.parser
import json
import math
import re
import sys
import xml.etree.ElementTree as ET

d = sys.argv[1]
r = json.load(open(d + "/report.json", encoding="utf-8"))
pre = r["preprocessing"]
assert pre["layout"] == "NCHW" and pre["channels"] == 1, pre
assert math.isclose(pre["pixel_scale"], 1 / 255) and math.isclose(pre["mean"][0], 0.286), pre
assert pre["class_names"][9] == "Ankle boot" and pre["num_classes"] == 10, pre
models = r["models"]
assert [m["name"] for m in models] == ["teacher", "student <distilled> & \"quoted\""], models
assert models[0]["top1"] == 94.5 and models[1]["ort_ms_batch1"] is None, models
assert models[1]["params"] is None and models[0]["macs"] == 40_000_000, models
stages = r["stages"]
assert stages[0]["loss"]["y"][1] is None and len(stages[1]["val_top1"]["x"]) == 3, stages


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


text = open(d + "/report.html", encoding="utf-8").read()
c = Checker()
c.feed(text)
c.close()
assert not c.stack, c.stack
svgs = re.findall(r"<svg.*?</svg>", text, re.S)
assert len(svgs) == 2, len(svgs)
for s in svgs:
    root = ET.fromstring(s)
    assert root.tag.endswith("svg") and root.findall(".//{http://www.w3.org/2000/svg}path")
md = open(d + "/report.md", encoding="utf-8").read()
assert "| teacher | 94.50% |" in md, md
print("report files ok")
