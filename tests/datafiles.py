"""Small, valid dataset folders written by tests (support code, not a test file)."""

from __future__ import annotations

from pathlib import Path

GENRES = ["unknown", "Action", "Comedy"]


def write_ml100k(root: Path, ratings: str | None = None) -> Path:
    """A tiny, valid ml-100k folder (3 users, 4 items, 3 genres); ``ratings`` replaces u.data."""
    folder = root / "ml-100k"
    folder.mkdir()
    (folder / "u.occupation").write_text("engineer\nstudent\n")
    (folder / "u.genre").write_text("".join(f"{g}|{i}\n" for i, g in enumerate(GENRES)) + "\n")
    (folder / "u.user").write_text(
        "1|24|M|engineer|85711\n2|53|F|student|T8H1N\n3|23|M|student|02139\n"
    )
    (folder / "u.item").write_text(
        "".join(f"{i}|Movie {i} (1995)|01-Jan-1995||http://x|0|{i % 2}|1\n" for i in range(1, 5))
    )
    data = ratings or "".join(
        f"{u}\t{i}\t{(u + i) % 5 + 1}\t{880000000 + 10 * u + i}\n"
        for u in (1, 2, 3)
        for i in (1, 2, 3, 4)
    )
    (folder / "u.data").write_text(data)
    (folder / "u1.base").write_text(data)
    (folder / "u1.test").write_text("1\t1\t3\t880000000\n")
    return folder
