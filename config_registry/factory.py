"""A team made by the caller's own code (``module:function``), dumped for registering.

    from config_registry.factory import dump_factory

    component = dump_factory("mypackage.teams:support_triage")   # the team's dump_component()
    registry.add("support_triage", component, manifest, "first version")

The factory is the caller's code: whatever its import or its call raises, and whatever it returns that is
not a team or an agent, is a :class:`FactoryInvalid` saying which.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from autogen_core import ComponentModel

from config_registry.errors import FactoryInvalid
from config_registry.missing import install_hint
from config_registry.validate import check_nothing_dropped


def dump_factory(factory: str) -> ComponentModel:
    """Build a team with ``module:function`` and return its ``dump_component()``.

    Raises:
        FactoryInvalid: The factory cannot be imported, raises, or returns something that is not a team, or
            the team cannot be dumped (a package it needs to dump itself missing: the hint says what to install).
        DefinitionInvalid: Its dump would leave out what decides how it behaves (a ``selector_func``, a
            tool's closure): :func:`config_registry.validate.check_nothing_dropped`.
    """
    built = _call_factory(factory)
    check_nothing_dropped(built)  # while the team object is at hand: its dump has lost what this looks for
    try:
        dumped: ComponentModel = built.dump_component()
    except Exception as exc:  # a team that cannot dump itself cannot be registered; say why
        raise FactoryInvalid(
            f"the team from {factory} cannot be dumped: {type(exc).__name__}: {exc}",
            hint=install_hint(exc) or "every participant, model client and tool must be an AutoGen component",
        ) from exc
    return dumped


def _import_factory(factory: str) -> Callable[[], Any]:
    module_name, _, function_name = factory.partition(":")
    if not module_name or not function_name:
        raise FactoryInvalid(
            f"factory {factory!r} is not 'module:function'", hint="e.g. mypackage.teams:support_triage"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise FactoryInvalid(
            f"cannot import factory {factory}: {exc}", hint="check the module path and function name"
        ) from exc
    except (Exception, SystemExit) as exc:  # the module is the caller's code: its import may fail in any way
        raise FactoryInvalid(
            f"importing the factory's module {module_name!r} raised {type(exc).__name__}: {exc}",
            hint="fix the module so that it imports cleanly",
        ) from exc
    function = getattr(module, function_name, None)
    if function is None:
        raise FactoryInvalid(
            f"cannot import factory {factory}: module {module_name!r} has no {function_name!r}",
            hint="check the module path and function name",
        )
    return function  # type: ignore[no-any-return]


def _call_factory(factory: str) -> Any:
    from autogen_agentchat.base import ChatAgent, Team

    function = _import_factory(factory)
    try:
        built = function()
    except (Exception, SystemExit) as exc:  # the factory is the caller's code: any failure is a typed error
        raise FactoryInvalid(
            f"factory {factory} raised {type(exc).__name__}: {exc}",
            hint="fix the factory so that it builds the team without arguments",
        ) from exc
    if inspect.iscoroutine(built):
        built.close()  # never to be awaited: closed now, Python does not warn about it at exit
        raise FactoryInvalid(
            f"factory {factory} is an async function: calling it returned a coroutine, not a team or agent",
            hint="make it a plain `def` that returns the team: the registry calls it and does not await it",
        )
    if isinstance(built, type):
        raise FactoryInvalid(
            f"factory {factory} returned the class {built.__name__} itself, not a team or agent",
            hint=f"return an instance: {built.__name__}([...participants], termination_condition=...)",
        )
    if not isinstance(built, Team | ChatAgent):
        raise FactoryInvalid(
            f"factory {factory} returned a {type(built).__name__}, not a team or agent",
            hint="return an AutoGen team (e.g. RoundRobinGroupChat) or an AssistantAgent",
        )
    return built
