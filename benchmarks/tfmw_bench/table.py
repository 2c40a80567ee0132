"""The printed table: one row formatter for every row, and the table's sections."""

from __future__ import annotations

from .report import PERCENTILE

RULE = "-" * 96

# A layout is one (gap, format spec) per column: `gap` spaces, then the cell formatted.
COMPARE = ((0, "<34"), (0, ">22"), (0, ">22"), (0, ">9"), (2, ""))  # label, 2 values, ratio, goal
THREADS = ((0, "<34"),) + ((0, ">14"),) * 4


def row(layout, *cells) -> str:
    """One table row. Cells beyond the layout are an error; fewer cells leave the last
    columns out, gaps included (so a row without a goal has no trailing blanks)."""
    if len(cells) > len(layout):
        raise ValueError(f"{len(cells)} cells for {len(layout)} columns")
    return "".join(" " * gap + format(cell, spec) for (gap, spec), cell in zip(layout, cells))


def cell(st: dict | None, digits: int = 2) -> str:
    """A summary's median [min-max], or "-" without one."""
    if not st:
        return "-"
    text = f"{st['median']:.{digits}f}"
    if st["n"] > 1:
        text += f" [{st['min']:.{digits}f}-{st['max']:.{digits}f}]"
    return text


def ratio_text(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def goal_text(summary: dict, key: str | None) -> str:
    """The goal and its verdict: the figure (a ratio of fast modes, or the trivial cell's
    median) and its 90% interval; "ok" / "MISSED" when the whole interval is on one side,
    else "inconclusive"."""
    goal = summary["goals"].get(key) if key else None
    if not goal:
        return ""
    interval = goal.get("interval")
    if interval is None:
        return goal["goal"] + " (too few rounds for a verdict)"
    unit = " ms" if key == "trivial_ms" else "x"
    verdict = {True: "ok", False: "MISSED", None: "inconclusive"}[goal["met"]]
    figure = ("median" if key == "trivial_ms" else "medians" if key in PERCENTILE
              else "fast modes")
    return (f"{goal['goal']} {verdict} ({figure} {goal['value']:.2f}{unit}, 90% "
            f"{interval[0]:.2f}-{interval[1]:.2f})")


def _figure(summary: dict, key: str) -> str:
    """A figure judged like a goal (fast modes and their 90% interval), with no goal."""
    figure = summary.get("figures", {}).get(key)
    if not figure or figure.get("interval") is None:
        return ""
    low, high = figure["interval"]
    kind = "medians" if key in PERCENTILE else "fast modes"
    return f"({kind} {figure['value']:.2f}x, 90% {low:.2f}-{high:.2f})"


def print_table(report: dict, use_ray: bool, threads_split: int | None) -> None:
    """The whole table; the threads section only when `threads_split` is given."""
    s = report["summary"]
    sections = [_header(report), _contenders(s), _versus_ray(report, use_ray), _dashboard(s),
                [_trivial(s)]]
    if threads_split is not None:
        sections.append(_threads(s, threads_split))
    failures = _failures(report)
    if failures:
        sections.append(failures)
    for lines in sections:
        print(RULE)
        for line in lines:
            print(line)
    print(RULE, flush=True)


def _header(report: dict) -> list[str]:
    m, j = report["machine"], report["job"]
    return [
        f"tfmw_notebook benchmark  {report['date']}  {m['hostname']}",
        f"machine: {m['cores']} cores ({m['usable_cores']} usable), {m['cpu_model']}, "
        f"python {m['python']}, TF {m['tensorflow']}, tf-keras {m['tf_keras']}, "
        f"ipyparallel {m['ipyparallel']}",
        f"load average (1 min) start {m['loadavg_at_start'][0]:.2f}, "
        f"end {m.get('loadavg_at_end', [float('nan')])[0]:.2f}",
        f"job {j.get('name', 'dense')}: {j['workers']} workers, {j['model']}, "
        f"{j['features']} features, global batch "
        f"{j['global_batch']}, {j['epochs']}x{j['steps_per_epoch']} = {j['steps']} steps, "
        f"{j.get('keras', 'tf-keras')}; "
        f"rounds: {len(report['rounds'])}" + ("" if report["complete"] else " (INCOMPLETE)"),
        "medians [min-max] in seconds unless noted; ratio = tfmw / floor (of medians)",
    ]


def _contenders(s: dict) -> list[str]:
    r = s["ratios"]
    rows = [
        ("boot (start -> ready) s", s["floor_boot"], s["tfmw_boot"], r["boot"], "boot"),
        ("fit (cold cell) s", s["floor_cell"], s["tfmw_cold_cell"], r["fit_cold"], None),
        ("fit (warm cell) s", s["floor_warm_cell"], s["tfmw_warm_cell"], r["fit_warm"],
         "fit_warm"),
        ("  model.fit alone (warm) s", s["floor_fit"], s["tfmw_warm_fit"], r["model_fit_warm"],
         None),
        ("  floor until every worker finished s", s.get("floor_warm_all"),
         s["tfmw_warm_cell"], r.get("all_warm"), "all_warm"),
        ("  training loop (warm) s", s.get("floor_warm_loop"), s.get("tfmw_warm_loop"),
         r.get("loop_warm"), "loop_warm"),
        ("wall (start -> trained) s", s["floor_wall"], s["tfmw_wall"], r["wall"], None),
        ("stop s", None, s["tfmw_stop"], None, None),
    ]
    return [row(COMPARE, "metric", "floor", "tfmw", "ratio", "goal")] + [
        row(COMPARE, label, cell(floor), cell(tfmw), ratio_text(value), goal_text(s, goal))
        for label, floor, tfmw, value, goal in rows]


def _versus_ray(report: dict, use_ray: bool) -> list[str]:
    s = report["summary"]
    r = s["ratios"]
    if use_ray and (s["ray_first"] or s["ray_second"]):
        return [
            row(COMPARE, "vs Ray Train", "ray", "tfmw", "tfmw/ray"),
            row(COMPARE, "ray.init s", cell(s["ray_init"]), "-", "-"),
            row(COMPARE, "first fit() vs tfmw wall s", cell(s["ray_first"]),
                cell(s["tfmw_wall"]), ratio_text(r["tfmw_wall_vs_ray_first"])),
            row(COMPARE, "second fit() vs warm cell s", cell(s["ray_second"]),
                cell(s["tfmw_warm_cell"]), ratio_text(r["tfmw_warm_vs_ray_second"])),
        ]
    return [f"Ray Train: {report['ray']}" + ("" if report["ray"] != "installed"
                                              else " (every Ray run failed)")]


def _dashboard(s: dict) -> list[str]:
    return [
        row(COMPARE, "dashboard (warm cluster)", "off", "on", "on/off", "goal"),
        row(COMPARE, "steps/s (training loop)", cell(s["dashboard_off_steps_per_s"], 1),
            cell(s["dashboard_on_steps_per_s"], 1), ratio_text(s["ratios"]["dashboard"]),
            goal_text(s, "dashboard")),
        row(COMPARE, "cell s (ratio: as steps/s)", cell(s["dashboard_off_cell"]),
            cell(s["dashboard_on_cell"]), ratio_text(s["ratios"].get("dashboard_cell")), ""),
        row(COMPARE, "cells with the post-fit stall", _share(s.get("dashboard_off_stalled")),
            _share(s.get("dashboard_on_stalled")), "", ""),
        row(COMPARE, "notebook-side CPU in the cell s", cell(s.get("dashboard_off_kernel_cpu")),
            cell(s.get("dashboard_on_kernel_cpu")), "", ""),
        row(COMPARE, "final PNG after the cell s", "-", cell(s["dashboard_on_finish"]), "", ""),
        "",
        row(COMPARE, "the cell as the magic runs it", "plain", "default", "ratio",
            "goal"),
        row(COMPARE, "cell s (dashboard + checkpoints)", cell(s["dashboard_off_cell"]),
            cell(s.get("default_cell")), ratio_text(s["ratios"].get("default_cell")),
            goal_text(s, "default_cell")),
        row(COMPARE, "notebook-side CPU in the cell s", cell(s.get("dashboard_off_kernel_cpu")),
            cell(s.get("default_kernel_cpu")), "", ""),
    ] + ([row(COMPARE, "  every worker writing (before)", cell(s["dashboard_off_cell"]),
              cell(s["in_place_cell"]), ratio_text(s["ratios"].get("in_place_cell")),
              _figure(s, "in_place_cell"))] if s.get("in_place_cell") else [])


def _share(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def _trivial(s: dict) -> str:
    t = s["trivial_ms"]
    if not t:
        return "trivial cell round trip: -"
    extra = f", p90 {t['p90']:.1f}" if "p90" in t else ""
    return (f"trivial cell round trip: median {t['median']:.1f} ms (min {t['min']:.1f}, "
            f"max {t['max']:.1f}{extra}, n={t['n']})   goal {goal_text(s, 'trivial_ms')}")


def _threads(s: dict, split: int) -> list[str]:
    lines = [f"threads experiment (floor processes, warm = 2nd fit in the process; "
             f"split = intra = inter = {split})",
             row(THREADS, "", "median s", "stdev s", "IQR s", "min-max s")]
    for label, key in (("TF default pools, warm fit", "threads_default_warm_fit"),
                       ("split pools, warm fit", "threads_split_warm_fit"),
                       ("TF default pools, cold fit", "threads_default_cold_fit"),
                       ("split pools, cold fit", "threads_split_cold_fit")):
        st = s[key]
        if not st:
            lines.append(row(THREADS, label, "-", "-", "-", "-"))
            continue
        dev = "-" if st["stdev"] is None else f"{st['stdev']:.2f}"
        iqr = "-" if st["iqr"] is None else f"{st['iqr']:.2f}"
        lines.append(row(THREADS, label, f"{st['median']:.2f}", dev, iqr,
                         f"{st['min']:.2f}-{st['max']:.2f}"))
    lines.append("split / default (warm, medians): "
                 + ratio_text(s["ratios"]["threads_split_vs_default"]))
    return lines


def _failures(report: dict) -> list[str]:
    errors = [(e["round"], key) for e in report["rounds"] for key, v in e.items()
              if isinstance(v, dict) and ("error" in v or "failed" in v
                                          or any(isinstance(w, dict) and "error" in w
                                                 for w in v.values()))]
    if not errors:
        return []
    return ["failed: " + ", ".join(f"round {n} {key}" for n, key in errors)
            + " (messages in the JSON)"]


# Keras 3 against tf-keras: summary key -> what it is.
KERAS_ROWS = {
    "tfmw_boot": "tfmw start",
    "floor_boot": "floor start",
    "tfmw_warm_cell": "tfmw warm cell",
    "floor_warm_cell": "floor warm cell",
    "tfmw_warm_fit": "tfmw model.fit",
    "floor_fit": "floor model.fit",
}


def print_keras_comparison(keras3: dict, keras2: dict) -> None:
    """Keras 3's medians against tf-keras', from rounds that ran them in turn."""
    print(RULE)
    print("Keras 3 against tf-keras (same job, same rounds; ratio = Keras 3 / tf-keras)")
    for key, label in KERAS_ROWS.items():
        three, two = keras3.get(key), keras2.get(key)
        if not three or not two:
            print(f"  {label:<18} no samples")
            continue
        print(f"  {label:<18} {three['median']:8.3f} s  vs {two['median']:8.3f} s  "
              f"{three['median'] / two['median']:6.2f}x")
    print(RULE, flush=True)
