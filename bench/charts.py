"""PNG charts of a suite's results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .suite import Workload

__all__ = ["draw_charts"]

_AIOPRODUCER_COLOR = "#1f77b4"
_OTHER_COLOR = "#9a9a9a"
_JAVA_COLOR = "#d62728"


def _color(client: str) -> str:
    if client.startswith("aioproducer"):
        return _AIOPRODUCER_COLOR
    return _JAVA_COLOR if client == "java" else _OTHER_COLOR


def draw_charts(
    suite: str, tables: list[tuple[Workload, dict[str, dict[str, Any]]]], out_dir: Path
) -> list[str]:
    """Draw the throughput, CPU and latency charts; returns their file names (in ``out_dir``)."""
    import matplotlib

    matplotlib.use("Agg")
    names = []
    tput = [(w, cells) for w, cells in tables if not w.rate]
    lat = [(w, cells) for w, cells in tables if w.rate]
    if tput:
        names.append(_throughput_chart(suite, tput, out_dir))
        names.append(_cpu_chart(suite, tput, out_dir))
    if lat:
        names.append(_latency_chart(suite, lat, out_dir))
    return names


def _throughput_chart(
    suite: str, tables: list[tuple[Workload, dict[str, dict[str, Any]]]], out_dir: Path
) -> str:
    import matplotlib.pyplot as plt

    cols = 2 if len(tables) > 1 else 1
    rows = math.ceil(len(tables) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 3.6 * rows), squeeze=False)
    for ax, (w, cells) in zip(axes.flat, tables, strict=False):
        clients = list(cells)
        medians, lows, highs, labels = [], [], [], []
        for client in clients:
            s = cells[client]
            if s["status"] == "ok":
                med = s["rate_median"]
                medians.append(med / 1000)
                lows.append((med - min(s["rates"])) / 1000)
                highs.append((max(s["rates"]) - med) / 1000)
                labels.append(client)
            else:
                medians.append(0.0)
                lows.append(0.0)
                highs.append(0.0)
                labels.append(f"{client} ({s['status']})")
        y = range(len(clients))
        ax.barh(
            list(y),
            medians,
            xerr=[lows, highs],
            color=[_color(c) for c in clients],
            capsize=2,
        )
        ax.set_yticks(list(y), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("thousand records/s (median, min-max)")
        ax.set_title(w.name, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(tables) :]:
        ax.axis("off")
    fig.suptitle(f"Producer throughput ({suite} suite; every run verified)")
    fig.tight_layout()
    name = f"{suite}-throughput.png"
    fig.savefig(out_dir / name, dpi=110)
    plt.close(fig)
    return name


def _cpu_chart(
    suite: str, tables: list[tuple[Workload, dict[str, dict[str, Any]]]], out_dir: Path
) -> str:
    """CPU seconds per million records: on a busy machine the steadier comparison."""
    import matplotlib.pyplot as plt

    cols = 2 if len(tables) > 1 else 1
    rows = math.ceil(len(tables) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 3.6 * rows), squeeze=False)
    for ax, (w, cells) in zip(axes.flat, tables, strict=False):
        clients = list(cells)
        values = [
            cells[c]["cpu_s_per_million_median"] if cells[c]["status"] == "ok" else 0.0
            for c in clients
        ]
        labels = [
            c + ("*" if cells[c].get("cpu_includes_startup") else "")
            if cells[c]["status"] == "ok"
            else f"{c} ({cells[c]['status']})"
            for c in clients
        ]
        y = list(range(len(clients)))
        ax.barh(y, values, color=[_color(c) for c in clients])
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("client CPU seconds per million records (median; lower is better)")
        ax.set_title(w.name, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(tables) :]:
        ax.axis("off")
    fig.suptitle(
        f"Client CPU per record ({suite} suite; * = whole JVM process, incl. start-up and JIT)"
    )
    fig.tight_layout()
    name = f"{suite}-cpu.png"
    fig.savefig(out_dir / name, dpi=110)
    plt.close(fig)
    return name


def _latency_chart(
    suite: str, tables: list[tuple[Workload, dict[str, dict[str, Any]]]], out_dir: Path
) -> str:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tables), figsize=(7 * len(tables), 4.2), squeeze=False)
    keys = (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9"))
    width = 0.27
    for ax, (w, cells) in zip(axes.flat, tables, strict=True):
        clients = [c for c, s in cells.items() if s["status"] == "ok" and "p50_ms" in s]
        for k, (key, label) in enumerate(keys):
            values = [statistics.median(cells[c][key]) for c in clients]
            ax.bar(
                [i + (k - 1) * width for i in range(len(clients))],
                values,
                width,
                label=label,
                alpha=0.5 + 0.25 * k,
                color=["#2ca02c", "#ff7f0e", "#d62728"][k],
            )
        ax.set_xticks(range(len(clients)), clients, rotation=40, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("send-to-ack latency, ms (log scale)")
        ax.set_title(f"{w.rate:,} records/s ({w.name})", fontsize=9)
        ax.grid(axis="y", alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(f"Producer latency at fixed rates ({suite} suite)")
    fig.tight_layout()
    name = f"{suite}-latency.png"
    fig.savefig(out_dir / name, dpi=110)
    plt.close(fig)
    return name
