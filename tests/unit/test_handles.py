"""The typed actor clients hold to the actors they call, and nothing else calls by string.

Read from the source, without Ray: each client method's one ``self.call``/``self.call_sync``
names, as a string literal, the remote method of the same name (``_sync`` dropped) on the
actor class the client wraps, forwards the client's own parameters in the actor's order,
and binds to the actor's signature. A rename, a new parameter or a swapped argument on
either side fails here instead of as an ``AttributeError`` or a wrong call on a cluster.
"""

from __future__ import annotations

import ast
import inspect
import pickle
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from driver_review.runtime import handles
from driver_review.runtime.cache_actor import CacheService
from driver_review.runtime.governor_actor import GovernorService
from driver_review.runtime.names import ActorRef
from driver_review.runtime.orchestrator_actor import OrchestratorService
from driver_review.runtime.poller import PollerService
from driver_review.runtime.pool import StagePoolService
from driver_review.runtime.worker import StageWorker
from serve_app.admin_server import AdminServer

ROOT = Path(__file__).resolve().parents[2]

WRAPS: dict[type[ActorRef], type] = {
    handles.OrchestratorClient: OrchestratorService,
    handles.GovernorClient: GovernorService,
    handles.CacheClient: CacheService,
    handles.StagePoolClient: StagePoolService,
    handles.StageWorkerClient: StageWorker,
    handles.PollerClient: PollerService,
    handles.AdminClient: AdminServer,
}


def _client_methods() -> list[tuple[type[ActorRef], str]]:
    return [
        (cls, name)
        for cls in WRAPS
        for name, value in vars(cls).items()
        if not name.startswith("_") and inspect.isfunction(value)
    ]


def _remote_call(cls: type, name: str) -> ast.Call:
    """The one ``self.call(...)`` / ``self.call_sync(...)`` in ``cls.name``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(cls, name))))
    func = tree.body[0]
    assert isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
    calls = [
        node
        for node in ast.walk(func)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("call", "call_sync")
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    ]
    assert len(calls) == 1, f"{cls.__name__}.{name}: {len(calls)} remote calls, not one"
    return calls[0]


def test_every_client_is_checked() -> None:
    clients = {
        value
        for value in vars(handles).values()
        if isinstance(value, type) and issubclass(value, ActorRef) and value is not ActorRef
    }
    assert clients == set(WRAPS)
    assert set(handles.__all__) == {cls.__name__ for cls in WRAPS}


@pytest.mark.parametrize(
    ("cls", "name"), _client_methods(), ids=lambda v: v if isinstance(v, str) else v.__name__
)
def test_client_method_matches_its_actor(cls: type[ActorRef], name: str) -> None:
    if name == "name_for":  # a static helper, not a remote call
        return
    actor = WRAPS[cls]
    call = _remote_call(cls, name)
    where = f"{cls.__name__}.{name}"
    remote_arg = call.args[0]
    assert isinstance(remote_arg, ast.Constant) and isinstance(remote_arg.value, str), (
        f"{where}: the remote method is not a string literal"
    )
    remote = remote_arg.value
    sync = name.endswith("_sync")
    assert remote == name.removesuffix("_sync"), f"{where} calls {remote!r}"
    assert call.func.attr == ("call_sync" if sync else "call"), where  # type: ignore[attr-defined]
    assert inspect.iscoroutinefunction(getattr(cls, name)) is not sync, where

    target = getattr(actor, remote, None)
    assert callable(target), f"{actor.__name__} has no method {remote!r} ({where})"
    assert inspect.iscoroutinefunction(target), f"{actor.__name__}.{remote} is not async"
    actor_params = list(inspect.signature(target).parameters)[1:]
    client_params = list(inspect.signature(getattr(cls, name)).parameters)[1:]
    # Same names, same order: the client is the actor's signature, typed.
    assert client_params == actor_params[: len(client_params)], (
        f"{where}{client_params} against {actor.__name__}.{remote}{actor_params}"
    )
    # Each argument sent is built from the client parameter in that place.
    for param, arg in zip(client_params, call.args[1:], strict=True):
        used = {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)}
        assert param in used, f"{where}: argument for {param!r} is built from {used}"
    assert not call.keywords, f"{where}: keyword arguments to a remote call"
    # And what is sent binds to what the actor takes (no missing required parameter).
    inspect.signature(target).bind(None, *[object()] * (len(call.args) - 1))


def test_names_are_the_actors_names() -> None:
    assert handles.OrchestratorClient("main").name == "main/orchestrator"
    assert handles.GovernorClient("main").name == "main/governor"
    assert handles.CacheClient("main").name == "main/cache"
    assert handles.PollerClient("main").name == "main/poller"
    assert handles.AdminClient("main").name == "main/admin"
    assert handles.StagePoolClient("main", "security").name == "main/pool/security"
    worker = handles.StageWorkerClient("main", "security", 3)
    assert worker.name == "main/worker/security/3" == worker.name_for("main", "security", 3)
    # A pool's worker is replaced, not waited for: no retries unless asked.
    assert worker.timeout_s == 0


def test_a_client_pickles_as_itself_by_name() -> None:
    held = handles.StagePoolClient("main", "intake", timeout_s=7.0, handle=object())
    again = pickle.loads(pickle.dumps(held))
    assert type(again) is handles.StagePoolClient
    assert (again.name, again.timeout_s, again._handle) == ("main/pool/intake", 7.0, None)


# -- no method named as a string outside the clients ----------------------------------
STRING_CALL = re.compile(r"\.call(?:_sync)?\(")
#: Where the string form is the mechanism itself.
ALLOWED = {"driver_review/runtime/names.py", "driver_review/runtime/handles.py"}
#: Modules being moved elsewhere, converted once they land; remove an entry when its
#: file no longer calls by string (this test then says so).
PENDING: set[str] = set()


def _string_callers() -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for package in ("driver_review", "serve_app", "jobs"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            lines = [
                i
                for i, line in enumerate(path.read_text().splitlines(), 1)
                if STRING_CALL.search(line)
            ]
            if lines:
                found[rel] = lines
    return found


def test_no_module_calls_an_actor_method_by_string() -> None:
    found = _string_callers()
    offenders: dict[str, Any] = {
        rel: lines for rel, lines in found.items() if rel not in ALLOWED | PENDING
    }
    assert not offenders, f"call the typed client (runtime/handles.py) instead: {offenders}"
    done = sorted(PENDING - set(found))
    assert not done, f"no longer calling by string, remove from PENDING: {done}"
