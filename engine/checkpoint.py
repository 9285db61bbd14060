"""Checkpoints of a run, so a long benchmark can go in pieces (``--checkpoint-every``, ``--resume``).

A checkpoint is taken between rounds and holds everything the next round depends on: the run's
settings, the protocol object on the driver (its config, dataset, accountant and counters), every
node's state and RNG on every host, the undelivered message batches, the ledger, the last metrics
and the wall time spent so far. Resuming rebuilds the deployment with the same placement, puts
the state back and continues: the rounds after it are the rounds an uninterrupted run would have
made (tests/engine/test_checkpoint.py). The record is a :class:`Checkpoint`; the file holds it as a plain
dict (:meth:`Checkpoint.payload`: ``format`` and one key per field), which :func:`load_checkpoint`
turns back into a :class:`Checkpoint`.

Trust. The state is a pickle, and unpickling can run any code the file names (a ``__reduce__``
that calls ``os.system``). So a checkpoint is authenticated, and nothing in a file is unpickled
before its tag verifies:

    checkpoint.pkl = MAGIC (8 bytes) | format (2 bytes) | payload length (8 bytes)
                     | tag (32 bytes) | payload (the pickle)
    tag = HMAC-SHA256(key, every byte of the file but the tag itself)

The key is 32 bytes from the operating system's generator (``secrets.token_bytes``), created on
the first save in ``~/.privrec/checkpoint.key`` (the folder ``$PRIVREC_HOME`` names instead, when
set) with mode 0600 in a 0700 folder; it is never written to a run folder, and a key readable by
other users is refused, as ssh refuses such a private key. :func:`load_checkpoint` reads the file
once into memory, checks the header, recomputes the tag over those bytes and compares it with
``hmac.compare_digest``; a file without the header (an older plain pickle included), of another
format, truncated, changed after it was written, or signed with another machine's key is refused
with a :class:`CheckpointError` in one line naming the file and why — before any of it is
unpickled or sent anywhere. Only then are the same bytes unpickled. Resuming your own runs on your
own machine works without a step; to resume on another machine of your own, copy the key file
there (README, "What leaves a node"). Anyone who holds the key can make checkpoints this machine
will load: keep it like an ssh private key.

The host snapshots inside a checkpoint (``deployment["hosts"]``: each host's nodes, pickled by the
host) are bytes that the driver does not open: :meth:`Deployment.restore` sends them to the host
actors, which unpickle them there. That is safe because they are part of the file whose tag the
driver verified as a whole before it unpickled anything: a host only ever unpickles bytes this
machine's key signed.

A checkpoint holds the dataset, every node's private state and the RSA private key of a key
server: it is written with mode 0600 and must not be shared (README, "What leaves a node").
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import secrets
import stat
import struct
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodes.step import RoundStats

CHECKPOINT_NAME = "checkpoint.pkl"
PREVIOUS_NAME = "checkpoint.prev.pkl"
# version of the checkpoint layout; a checkpoint of another version is refused. 3: the signed
# header above (2 and older were plain pickles, which are refused without being unpickled)
FORMAT = 3

MAGIC = b"PRVRCKPT"
_LAYOUT = struct.Struct(">8sHQ")  # magic, format, payload length
TAG_SIZE = hashlib.sha256().digest_size  # 32
HEADER_SIZE = _LAYOUT.size + TAG_SIZE

HOME_ENV = "PRIVREC_HOME"  # the folder of privrec's per-user files (default ~/.privrec)
KEY_NAME = "checkpoint.key"
KEY_SIZE = 32


class CheckpointError(ValueError):
    """A missing, unreadable, foreign or tampered checkpoint; the message names the file."""


# --- the record --------------------------------------------------------------------------------


@dataclass
class RunTotals:
    """What a run has added up over its rounds: summary.json's ``sim_seconds``, ``faults`` and
    ``rejected``, and each metrics.jsonl row's ``sim_elapsed``.

    Attributes:
        sim_seconds: simulated seconds of every round so far.
        faults: every round's fault records (a host lost, a handler raised), in order.
        rejected: kind -> reason -> messages rejected by their receivers' checks.
    """

    sim_seconds: float = 0.0
    faults: list[dict] = field(default_factory=list)
    rejected: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, stats: RoundStats) -> None:
        """Add one round's :class:`nodes.step.RoundStats`."""
        self.sim_seconds += stats.sim_seconds
        self.faults.extend(stats.faults)
        for kind, by_reason in stats.rejected.items():
            total = self.rejected.setdefault(kind, {})
            for reason, n in by_reason.items():
                total[reason] = total.get(reason, 0) + n

    @classmethod
    def from_dict(cls, record: dict | None) -> RunTotals:
        """The totals a checkpoint file holds as a plain dict (missing keys count as zero)."""
        record = record or {}
        return cls(
            sim_seconds=record.get("sim_seconds", 0.0),
            faults=list(record.get("faults", [])),
            rejected={k: dict(v) for k, v in record.get("rejected", {}).items()},
        )


@dataclass
class Checkpoint:
    """Everything the next round of a run depends on, taken between two rounds.

    Attributes:
        next_round: the round a resumed run starts at (0-based; the rounds before it are done).
        settings: the run's :class:`engine.runner.RunSettings`.
        protocol: the protocol object on the driver (its config, dataset, accountant, counters).
        deployment: :meth:`nodes.deployment.Deployment.snapshot`: every host's pickled nodes,
            the undelivered message batches, the route and the ledger.
        metrics: the latest evaluation's metrics (``{}`` before the first).
        elapsed: wall seconds the run has spent so far.
        totals: the run's :class:`RunTotals` so far.
    """

    next_round: int
    settings: Any
    protocol: Any
    deployment: Any
    metrics: dict
    elapsed: float
    totals: RunTotals = field(default_factory=RunTotals)

    def payload(self) -> dict:
        """The plain dict the file holds: ``format`` and every field, ``totals`` as a dict."""
        record = {f.name: getattr(self, f.name) for f in fields(self)}
        return {"format": FORMAT, **record, "totals": asdict(self.totals)}

    @classmethod
    def from_payload(cls, payload: dict) -> Checkpoint:
        """The record of a file's payload dict (one without ``totals`` has none added up)."""
        names = {f.name for f in fields(cls)}
        record = {k: v for k, v in payload.items() if k in names}
        record["totals"] = RunTotals.from_dict(payload.get("totals"))
        return cls(**record)


# --- the key -----------------------------------------------------------------------------------


def privrec_home() -> Path:
    """``$PRIVREC_HOME``, else ``~/.privrec``."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".privrec").expanduser()


def key_path() -> Path:
    """Where this machine's checkpoint key lives: ``privrec_home()/checkpoint.key``."""
    return privrec_home() / KEY_NAME


def _shown(path: Path) -> str:
    """``path`` with the home folder written ``~`` (as the README names the key)."""
    try:
        return f"~/{Path(path).relative_to(Path.home())}"
    except ValueError:
        return str(path)


def _read_key(path: Path) -> bytes:
    """The key at ``path``, refused when other users may read or change it, or not a key."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise CheckpointError(f"{_shown(path)}: cannot read the checkpoint key ({e})") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        key = f.read(KEY_SIZE + 1)
    if os.name == "posix" and mode & 0o077:
        raise CheckpointError(
            f"{_shown(path)}: the checkpoint key is accessible to other users (mode "
            f"{stat.S_IMODE(mode):04o}); make it private with chmod 600 {_shown(path)}"
        )
    if len(key) != KEY_SIZE:
        raise CheckpointError(
            f"{_shown(path)}: not a privrec checkpoint key ({len(key)} bytes, expected {KEY_SIZE})"
        )
    return key


def _signing_key() -> bytes:
    """This machine's key, made on first use: 32 bytes from ``secrets``, mode 0600, in a 0700
    folder. It is written whole to a temporary file and linked into place, so that two processes
    making it at once agree on one and neither reads it half-written."""
    path = key_path()
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{KEY_NAME}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_SIZE))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # fails if another process linked its key first: that one wins
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)
    return _read_key(path)


def _verifying_key(path: Path) -> bytes:
    """The key to verify ``path``'s tag with; none on this machine refuses the checkpoint."""
    try:
        return _read_key(key_path())
    except FileNotFoundError:
        raise CheckpointError(
            f"{path}: not signed by this machine's key: there is no {_shown(key_path())} here "
            "(this machine's first checkpoint makes it); to resume on this machine a run another "
            "machine of yours wrote, copy that machine's key file here"
        ) from None


# --- saving ------------------------------------------------------------------------------------


def save_checkpoint(run_dir: Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint`` to ``run_dir/checkpoint.pkl`` atomically: into a temporary file (mode
    0600), signed, fsync'd, then renamed over the old one, which is kept as
    ``checkpoint.prev.pkl``. A crash at any point leaves a complete checkpoint behind (the old or
    the new one).

    Args:
        run_dir: the run folder (it exists).
        checkpoint: the record to write; the file holds :meth:`Checkpoint.payload`, pickled.

    Returns:
        The path of the checkpoint written (``run_dir/checkpoint.pkl``).

    Raises:
        CheckpointError: the checkpoint key would live inside ``run_dir``, or cannot be read.
    """
    run_dir = Path(run_dir)
    path, prev = run_dir / CHECKPOINT_NAME, run_dir / PREVIOUS_NAME
    key_file = key_path()
    if key_file.resolve().is_relative_to(run_dir.resolve()):
        raise CheckpointError(
            f"{key_file}: the checkpoint key must not live in the run folder {run_dir} (it would "
            f"travel with it); set {HOME_ENV} to a folder outside it"
        )
    key = _signing_key()
    tmp = path.with_suffix(".tmp")
    try:
        tmp.unlink(missing_ok=True)  # left by a crash: made afresh, so mode 0600 applies
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w+b") as f:
            f.write(bytes(HEADER_SIZE))  # filled in once the payload's length and tag are known
            pickle.dump(checkpoint.payload(), f, protocol=pickle.HIGHEST_PROTOCOL)
            head = _LAYOUT.pack(MAGIC, FORMAT, f.tell() - HEADER_SIZE)
            mac = hmac.new(key, head, hashlib.sha256)
            f.seek(HEADER_SIZE)  # the payload as written (from the page cache), in file order
            while chunk := f.read(1 << 20):
                mac.update(chunk)
            f.seek(0)
            f.write(head + mac.digest())
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if path.exists():
        os.replace(path, prev)
    os.replace(tmp, path)
    dir_fd = os.open(run_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the renames themselves reach the disk
    finally:
        os.close(dir_fd)
    return path


# --- loading -----------------------------------------------------------------------------------


def _why_none(run_dir: Path) -> str:
    """Why a run folder has no checkpoint, from its config.json's ``--checkpoint-every``."""
    import json

    try:
        settings = json.loads((run_dir / "config.json").read_text())["settings"]
        every, rounds = int(settings["checkpoint_every"]), int(settings["rounds"])
    except (OSError, ValueError, KeyError, TypeError):
        return "not a run folder, or its run was started without --checkpoint-every"
    if not every:
        return "the run was started without --checkpoint-every"
    return (
        f"the run stopped before its first checkpoint: --checkpoint-every {every} writes one "
        f"when round {min(every, rounds) - 1} is done (rounds count from 0)"
    )


def load_checkpoint(run_dir: str | Path) -> Checkpoint:
    """The last good checkpoint of ``run_dir``: ``checkpoint.pkl``, or the one before it when that
    one is missing or refused (a crash between the two renames of :func:`save_checkpoint`, a
    damaged disk; a warning says why the newer one was passed over). Both are verified before
    either is unpickled.

    Args:
        run_dir: the run folder.

    Returns:
        The :class:`Checkpoint` (a file without ``totals`` gets empty :class:`RunTotals`).

    Raises:
        CheckpointError: neither file is there, or neither verifies and reads (the message names
            the file and why; nothing refused was unpickled).
    """
    path, prev = Path(run_dir) / CHECKPOINT_NAME, Path(run_dir) / PREVIOUS_NAME
    try:
        return _load(path)
    except CheckpointError as newest:
        if prev.is_file():
            try:
                state = _load(prev)
            except CheckpointError:
                pass
            else:
                if path.exists():
                    warnings.warn(f"{newest}; resuming from {prev.name} instead", stacklevel=2)
                return state
        raise


def _load(path: Path) -> Checkpoint:
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint ({_why_none(path.parent)})")
    try:
        data = path.read_bytes()  # once: the bytes verified are the bytes unpickled
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read it ({e})") from None
    payload = _verified_payload(path, data)
    try:
        state = pickle.loads(payload)
    except Exception as e:  # signed here, but not by this version of privrec's classes
        raise CheckpointError(
            f"{path}: not a readable privrec checkpoint ({type(e).__name__}: {e})"
        ) from None
    needed = {"format", "next_round", "settings", "protocol", "deployment", "metrics", "elapsed"}
    if not isinstance(state, dict) or not needed <= set(state):
        raise CheckpointError(f"{path}: not a privrec checkpoint")
    if state["format"] != FORMAT:
        raise CheckpointError(
            f"{path}: checkpoint format {state['format']}, this version reads {FORMAT}"
        )
    return Checkpoint.from_payload(state)


def _verified_payload(path: Path, data: bytes) -> memoryview:
    """The pickle inside ``data`` once its header is well formed and its tag verifies with this
    machine's key; else the one line why it is refused. Nothing here unpickles."""
    if not data.startswith(MAGIC):
        if data[:1] == b"\x80":  # a pickle's PROTO opcode: format 2 or older
            raise CheckpointError(
                f"{path}: an unsigned checkpoint (a plain pickle, as privrec wrote before format "
                f"{FORMAT}); refused without loading it, since unpickling a file can run code"
            )
        raise CheckpointError(f"{path}: not a privrec checkpoint (no privrec header)")
    if len(data) < HEADER_SIZE:
        raise CheckpointError(f"{path}: not a readable privrec checkpoint (truncated header)")
    _, fmt, length = _LAYOUT.unpack_from(data)
    if fmt != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {fmt}, this version reads {FORMAT}")
    view = memoryview(data)
    if len(view) - HEADER_SIZE != length:
        raise CheckpointError(
            f"{path}: not a readable privrec checkpoint (truncated or damaged: "
            f"{len(view) - HEADER_SIZE} bytes after the header, {length} declared)"
        )
    key = _verifying_key(path)
    mac = hmac.new(key, view[: _LAYOUT.size], hashlib.sha256)
    mac.update(view[HEADER_SIZE:])
    if not hmac.compare_digest(mac.digest(), view[_LAYOUT.size : HEADER_SIZE]):
        raise CheckpointError(
            f"{path}: not signed by this machine's key ({_shown(key_path())}): written with "
            "another key, or changed since it was written; refused without loading it (to "
            "resume on this machine a run another machine of yours wrote, copy that machine's "
            f"key file here, or point {HOME_ENV} to a folder holding it)"
        )
    return view[HEADER_SIZE:]
