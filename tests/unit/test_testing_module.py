"""``durable_plans.testing`` as users meet it: its public names, its entry point, its extra.

The behaviour of the fake provider and the scripted model is tested in
``test_fake_provider.py`` and ``test_scripted_model.py``; here only what publishing them
adds: one public import path, no second copy of the scripted model, a runnable module, and
a clear message when the ``testing`` extra is missing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import durable_plans.testing as testing
from durable_plans.activities import scripted_model


def test_every_public_name_resolves_and_private_modules_stay_private() -> None:
    for name in testing.__all__:
        assert getattr(testing, name) is not None, name
    assert not any(name.startswith("_") for name in testing.__all__)
    assert sorted(testing.__all__) == sorted(set(testing.__all__))
    assert set(testing._HOMES) == set(testing.__all__)


def test_the_provider_process_loads_neither_the_temporal_client_nor_litellm() -> None:
    """``python -m durable_plans.testing`` is started by the dozen in crash tests: what it
    imports is what the provider needs, not what ``local_stack`` needs."""
    probe = (
        "import sys, durable_plans.testing._provider_process\n"
        "heavy = [m for m in ('temporalio.client', 'temporalio.worker', 'litellm',"
        " 'durable_plans.testing._local_stack') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_the_scripted_model_is_re_exported_not_copied() -> None:
    for name in ("SCRIPTED_MODEL", "LATENCY_ENV", "CARELESS_TOOL_CALL_ID", "plan_turn"):
        assert getattr(testing, name) is getattr(scripted_model, name), name
    assert testing.register_scripted_provider is scripted_model.register_scripted_provider


def test_python_m_durable_plans_testing_is_the_provider_process() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "durable_plans.testing", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "--scenario" in result.stdout and "--latency-ms" in result.stdout


def test_without_aiohttp_the_error_names_the_extra() -> None:
    # A None entry in sys.modules makes `import aiohttp` fail as if it were not installed.
    code = textwrap.dedent(
        """\
        import sys
        sys.modules["aiohttp"] = None
        import durable_plans.testing  # names load on first use: no provider yet

        assert durable_plans.testing.SCRIPTED_MODEL  # the scripted model needs no aiohttp
        try:
            from durable_plans.testing import FakeProvider
        except ImportError as e:
            print(e)
        else:
            print("imported")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "durable-plans[testing]" in result.stdout, result.stdout
