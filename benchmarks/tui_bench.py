"""TUI benchmark: first paint on 10,000 memories, open + search + scroll on 100,000.

    python benchmarks/tui_bench.py                 # both, 5 runs each, medians
    python benchmarks/tui_bench.py --runs 7 --dir /tmp/pmem-tui-bench

Stores are built once with the deterministic fake embedder (PMEM_EMBED_MODEL=fake-64) and cached
in --dir. Every measurement runs in a fresh Python process, headless at 80x24, so imports and
opening the database count. "first paint" is from process start to the first frame Textual hands to
the terminal with the first page of the list in it (a bare Textual app: its first frame); each run
also checks that this frame is the screen the app settles to, and reports when the app's `on_ready`
hook ran ("settled", a few quick repaints later) and when the footer's keys were shown.

Key timings go through Textual's Pilot, which sleeps until the app is idle after every key (~55-65 ms
on this machine even for a key that does nothing), so the same loop is run with an unbound key and
the difference is reported, with the process CPU time per key, which that sleeping does not count.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()  # before any import: the child's clock starts here

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

NOW = "2025-06-01T00:00:00Z"
WORDS = ("cabin wifi password deploy approval dana lee coffee vegetarian dinner train berlin paris "
         "meeting budget invoice garden tomato bicycle repair dentist appointment birthday gift book "
         "novel python sqlite vector memory tuesday weekend hiking rain umbrella kitchen oven recipe "
         "pasta flight hotel passport visa project deadline review release bug ticket client call").split()
TAGS = ("work", "home", "travel", "food", "health", "family", "code")


def build(path: Path, n: int) -> None:
    os.environ["PMEM_EMBED_MODEL"] = "fake-64"
    from pmem import MemoryStore
    from pmem.config import load
    from pmem.records import Memory

    rng = random.Random(n)
    store = MemoryStore(path, config=load(), clock=lambda: NOW)
    chunk = 10_000
    for start in range(0, n, chunk):
        batch = []
        for i in range(start, min(start + chunk, n)):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18)))
            day = 1 + i % 28
            batch.append(Memory(id=f"m{i:06d}", text=f"Note {i}: {words}.",
                                tags=rng.sample(TAGS, rng.randint(0, 2)),
                                tier="core" if i % 500 == 0 else "archival", pinned=i % 500 == 0,
                                created_at=f"2025-{1 + (i // 28) % 5:02d}-{day:02d}T{(i % 24):02d}:00:00Z",
                                expires_at="2025-07-01T00:00:00Z" if i % 50 == 0 else None))
        store.insert(batch, summary=f"bench {start}")
        print(f"  built {min(start + chunk, n):,}/{n:,}", file=sys.stderr)
    store.close()


def ensure_store(directory: Path, n: int) -> Path:
    path = directory / f"tui-{n}.db"
    if not path.exists():
        print(f"building {path} ({n:,} memories, fake embedder)…", file=sys.stderr)
        tmp = path.with_suffix(".building")
        for p in directory.glob(tmp.name + "*"):
            p.unlink()
        build(tmp, n)
        for suffix in ("-wal", "-shm"):
            Path(str(tmp) + suffix).unlink(missing_ok=True)
        tmp.rename(path)
    return path


# -- children: one measurement each, printed as JSON -----------------------------------------

def first_frames(result: dict, ready: Callable[[Any], bool]) -> None:
    """Record when Textual first hands a frame to the terminal (`App._display`; a headless app
    renders it and writes nothing) once `ready(app)` holds, and that frame's terminal text."""
    from textual.app import App

    shown = App._display

    def display(app, screen, renderable) -> None:
        if renderable is not None and "first_paint_s" not in result and ready(app):
            result["first_paint_s"] = time.perf_counter() - T0
            result["_first_frame"] = renderable.render_segments(app.console)
        shown(app, screen, renderable)

    App._display = display  # type: ignore[method-assign]


def child_paint(db: str) -> None:
    """pmem's first paint: the first frame with the first page of the list in it, and whether
    that frame is already the settled screen (what the app's `on_ready` hook sees, a few quick
    repaints later: scrollbars, the detail pane's resize)."""
    os.environ["PMEM_EMBED_MODEL"] = "fake-64"
    t_import = time.perf_counter()
    from pmem.tui import make_app

    t_imported = time.perf_counter()
    result: dict = {}
    first_frames(result, lambda app: app.table.rows_fetched > 0)

    def ready(app) -> None:
        result["settled_s"] = time.perf_counter() - T0
        result["rows"] = app.table.row_count
        result["rows_read"] = app.table.rows_fetched
        settled = app.screen._compositor.render_full_update()
        result["first_frame_complete"] = result.pop("_first_frame", None) == settled.render_segments(app.console)
        # The footer follows the first paint: also time the frame that shows its keys.
        from textual.widgets import Footer

        def keys_shown() -> None:
            result["keys_shown_s"] = time.perf_counter() - T0
            app.exit()

        def check() -> None:
            footers = app.screen_stack[0].query(Footer)
            if footers and footers.first().children and "keys_seen" not in result:
                result["keys_seen"] = True
                app.call_after_refresh(keys_shown)

        app.set_interval(0.002, check)

    app = make_app(db, on_ready=ready, now=NOW)
    t_app = time.perf_counter()
    app.run(headless=True, size=(80, 24))
    result.pop("keys_seen", None)
    result.update(import_s=t_imported - t_import, app_start_s=time.perf_counter() - t_app)
    print(json.dumps(result))


def child_floor() -> None:
    """The floor under any Textual app here: a bare one (a search box, a line of text, the
    footer) painted headless at 80x24, from process start to its first frame, as child_paint
    measures pmem's."""
    from textual.app import App
    from textual.widgets import Footer, Input, Static

    result: dict = {}
    first_frames(result, lambda app: True)

    class Bare(App):
        def compose(self):
            yield Input()
            yield Static("memory")
            yield Footer()

        def on_ready(self) -> None:
            result["settled_s"] = time.perf_counter() - T0
            self.exit()

    Bare().run(headless=True, size=(80, 24))
    result.pop("_first_frame", None)
    print(json.dumps(result))


def child_search(db: str, mode: str) -> None:
    import asyncio

    os.environ["PMEM_EMBED_MODEL"] = "fake-64"
    from pmem.tui import make_app

    result: dict = {}
    queries = ["cabin password", "dentist appointment tuesday", "berlin flight hotel"]
    first_frames(result, lambda app: app.table.rows_fetched > 0)

    async def main() -> None:
        painted = asyncio.Event()

        def ready(app) -> None:
            result["settled_s"] = time.perf_counter() - T0
            result.pop("_first_frame", None)
            painted.set()

        app = make_app(db, on_ready=ready, now=NOW, search_debounce=0, search_mode=mode, search_limit=50)
        shown = []
        original = app.show_hits

        def timed_show(gen, hits):
            original(gen, hits)
            shown.append((time.perf_counter(), len(hits)))

        app.show_hits = timed_show
        async with app.run_test(size=(80, 24)) as pilot:
            await painted.wait()
            if mode != "keyword":  # the model loads once, in a worker, when search opens
                t = time.perf_counter()
                await pilot.press("slash")
                await app.workers.wait_for_complete()
                result["model_load_s"] = time.perf_counter() - t
            else:
                await pilot.press("slash")
            times = []
            for q in queries:
                shown.clear()
                t = time.perf_counter()
                app.query_one("#search").value = q
                while not shown:
                    await asyncio.sleep(0.001)
                times.append(shown[-1][0] - t)
                result.setdefault("hits", []).append(shown[-1][1])
            result["search_s"] = times
            # Scrolling: clear the search, then page down through the list. Pilot waits for the
            # app to go idle after every key (~50-60 ms of sleeping here), so the same loop with
            # an unbound key is timed too; "cpu" is process time, which that sleeping does not count.
            await pilot.press("escape")
            await pilot.pause()
            app.table.focus()
            read_before = app.table.rows_fetched
            for key, name in (("z", "noop"), ("pagedown", "pagedown")):
                t, c = time.perf_counter(), time.process_time()
                for _ in range(40):
                    await pilot.press(key)
                await pilot.pause()
                result[f"{name}_40_s"] = time.perf_counter() - t
                result[f"{name}_40_cpu_s"] = time.process_time() - c
            result["rows_read_scrolling"] = app.table.rows_fetched - read_before
            result["cursor"] = app.table.cursor_row
            # Jump to the last memory (End) and back to the first (Home), each until repainted.
            for key in ("end", "home"):
                t = time.perf_counter()
                await pilot.press(key)
                result[f"{key}_s"] = time.perf_counter() - t
            result["rows_read_total"] = app.table.rows_fetched
            result["total"] = app.total
            app.exit()

    asyncio.run(main())
    print(json.dumps(result))


def child_keys(db: str) -> None:
    """40 presses of each key, ms a key as (wall through Pilot, process CPU); `z` is bound to nothing."""
    import asyncio

    os.environ["PMEM_EMBED_MODEL"] = "fake-64"
    from pmem.tui import make_app

    result: dict = {}

    async def main() -> None:
        app = make_app(db, now=NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            for key in ("z", "pagedown", "down", "pageup"):
                t, c = time.perf_counter(), time.process_time()
                for _ in range(40):
                    await pilot.press(key)
                await pilot.pause()
                result[key] = [round((time.perf_counter() - t) / 40 * 1000, 1),
                               round((time.process_time() - c) / 40 * 1000, 1)]
            app.exit()

    asyncio.run(main())
    print(json.dumps(result))


def run_child(*args: str) -> dict:
    t = time.perf_counter()
    # As latency.py: users' Pythons cache bytecode (without it each child compiles edited modules again).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True, env=env)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    data["process_wall_s"] = time.perf_counter() - t
    return data


def med(values) -> float:
    return statistics.median(list(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "pmem-tui-bench")
    parser.add_argument("--child-paint", metavar="DB")
    parser.add_argument("--child-search", nargs=2, metavar=("DB", "MODE"))
    parser.add_argument("--child-keys", metavar="DB", help="per-key cost of z, pagedown, down, pageup")
    parser.add_argument("--child-floor", action="store_true", help="first paint of a bare Textual app")
    args = parser.parse_args()
    if args.child_floor:
        return child_floor()
    if args.child_keys:
        return child_keys(args.child_keys)
    if args.child_paint:
        return child_paint(args.child_paint)
    if args.child_search:
        return child_search(*args.child_search)

    args.dir.mkdir(parents=True, exist_ok=True)
    small, large = ensure_store(args.dir, 10_000), ensure_store(args.dir, 100_000)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.runs} runs each, medians; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")

    paints, floors = [], []
    for _ in range(args.runs):  # alternating, so both see the same machine
        paints.append(run_child("--child-paint", str(small)))
        floors.append(run_child("--child-floor"))
    print("10,000 memories, 80x24, headless")
    print(f"  first paint from process start   {med(p['first_paint_s'] for p in paints) * 1000:7.0f} ms "
          f"(min {min(p['first_paint_s'] for p in paints) * 1000:.0f}, max {max(p['first_paint_s'] for p in paints) * 1000:.0f})")
    print(f"  a bare Textual app, the same way {med(p['first_paint_s'] for p in floors) * 1000:7.0f} ms")
    print(f"  settled (the app's on_ready)     {med(p['settled_s'] for p in paints) * 1000:7.0f} ms; the first "
          f"frame was the settled screen in {sum(p['first_frame_complete'] for p in paints)} of {len(paints)} runs")
    print(f"  the footer's keys shown          {med(p['keys_shown_s'] for p in paints) * 1000:7.0f} ms")
    print(f"  of which importing pmem.tui      {med(p['import_s'] for p in paints) * 1000:7.0f} ms")
    print(f"  whole process incl. interpreter  {med(p['process_wall_s'] for p in paints) * 1000:7.0f} ms")
    print(f"  rows read for the first screen   {paints[0]['rows_read']:7d} (of {paints[0]['rows']:,})")

    for mode in ("keyword", "hybrid"):
        runs = [run_child("--child-search", str(large), mode) for _ in range(args.runs)]
        print(f"\n100,000 memories, search mode {mode} (fake-64 embedder)")
        print(f"  first paint from process start   {med(r['first_paint_s'] for r in runs) * 1000:7.0f} ms")
        if mode != "keyword":
            print(f"  model load (worker)              {med(r['model_load_s'] for r in runs) * 1000:7.0f} ms")
        per_query = [statistics.median(r["search_s"]) for r in runs]
        every = [s for r in runs for s in r["search_s"]]
        print(f"  keystroke to results shown       {med(per_query) * 1000:7.0f} ms (max {max(every) * 1000:.0f})")
        pd = med(r["pagedown_40_s"] for r in runs) * 1000
        noop = med(r["noop_40_s"] for r in runs) * 1000
        print(f"  40 x pagedown through Pilot      {pd:7.0f} ms ({pd / 40:.0f} ms a key; an unbound key: "
              f"{noop / 40:.0f} ms a key, so {(pd - noop) / 40:.0f} ms a key is the page down)")
        print(f"  CPU per pagedown                 {med(r['pagedown_40_cpu_s'] for r in runs) * 1000 / 40:7.1f} ms "
              f"(unbound key {med(r['noop_40_cpu_s'] for r in runs) * 1000 / 40:.1f} ms)")
        print(f"  rows read while scrolling        {runs[0]['rows_read_scrolling']:7,} (cursor at row "
              f"{runs[0]['cursor']:,} of {runs[0]['total']:,})")
        print(f"  End, then Home, through Pilot    {med(r['end_s'] for r in runs) * 1000:7.0f} ms, "
              f"{med(r['home_s'] for r in runs) * 1000:.0f} ms ({runs[0]['rows_read_total']:,} rows read in all)")


if __name__ == "__main__":
    main()
    if not any(a.startswith("--child") for a in sys.argv):
        print(f"\nload average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
