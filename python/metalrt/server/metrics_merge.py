"""Several servers' ``/metrics`` texts as one Prometheus exposition, each sample labelled
with the replica it came from (Ray Serve's aggregated ``/metrics``, ``ray_app``)."""
from __future__ import annotations

from typing import Dict

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# Prometheus' text format names types as these words.
_TYPES = {"counter", "gauge", "histogram", "summary", "info", "stateset", "gaugehistogram"}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample_line(sample: Sample) -> str:
    labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sample.labels.items())
    value = repr(float(sample.value)) if sample.value == sample.value else "NaN"
    return f"{sample.name}{{{labels}}} {value}"


def merge_metrics(texts: Dict[str, str], label: str = "replica") -> str:
    """``texts``: replica name → that replica's ``/metrics`` text (Prometheus text format
    0.0.4). Returns one text with each metric family once (its HELP and TYPE) and every
    sample of every replica, with ``label="<replica name>"`` added. Raises ValueError when
    a text does not parse, or a sample already has ``label``."""
    families: Dict[str, dict] = {}
    for replica in sorted(texts):
        try:
            parsed = list(text_string_to_metric_families(texts[replica]))
        except Exception as e:
            raise ValueError(f"[metrics] replica {replica}'s /metrics does not parse: {e}") \
                from None
        for family in parsed:
            entry = families.setdefault(family.name, {
                "help": family.documentation, "type": family.type, "samples": []})
            for sample in family.samples:
                if label in sample.labels:
                    raise ValueError(f"[metrics] {sample.name} already has a {label!r} label")
                entry["samples"].append(sample._replace(labels={**sample.labels,
                                                                label: replica}))
    lines = []
    for name, entry in families.items():
        exposed = name + "_total" if entry["type"] == "counter" else name
        lines.append(f"# HELP {exposed} {_escape(entry['help'])}")
        if entry["type"] in _TYPES:
            lines.append(f"# TYPE {exposed} {entry['type']}")
        lines.extend(_sample_line(s) for s in entry["samples"])
    return "\n".join(lines) + "\n"
