"""Mistakes found by the errors audit: each is an autotune error that names the problem and the fix, raised as
early as it can be known, instead of a raw TypeError/AttributeError from deep inside or a silent misreading."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from kernels_for_tests import add_kernel, count_trials

from autotune import CallError, Reference, Tuning, autotune
from autotune.errors import AutotuneError, ExpressionError, OptionError, SpaceError

GRID = "(cdiv(n, $BLOCK),)"
FAST = {"warmup": 0, "reps": 1, "refine_topk": 0, "compile_workers": 0, "isolate": "off"}


def _tuned(**kwargs):
    kwargs = {"space": {"BLOCK": (16, 32)}, "key": ["n"], "grid": GRID, "tuning": FAST, **kwargs}
    tuned = autotune(**kwargs)(add_kernel)
    return tuned, count_trials(tuned)


def _args(n=40):
    x = torch.arange(n, dtype=torch.float32)
    return x, torch.ones(n), torch.empty(n), n


def test_an_unknown_or_positional_tuning_field_is_an_option_error_naming_the_closest_field():
    with pytest.raises(OptionError, match=r"'repz' is not a Tuning field\. Did you mean 'reps'\?"):
        Tuning(repz=5)
    with pytest.raises(OptionError, match=r"keyword arguments only, e.g\. Tuning\(preset='fast'\)"):
        Tuning("fast")
    with pytest.raises(OptionError, match=r"'warmpu' is not a Tuning field\. Did you mean 'warmup'\?"):
        Tuning(preset="fast").replace(warmpu=1)
    assert Tuning(preset="fast", reps=7).replace(preset="thorough").reps == 7
    for made in (lambda: Tuning(preset=None), lambda: Tuning().replace(preset=None)):
        with pytest.raises(OptionError, match=r"preset: .*use one of: 'fast', 'default', 'thorough'"):
            made()


def test_an_env_switch_of_zeros_is_off_and_a_digit_of_another_script_is_refused(monkeypatch):
    tuned, tried = _tuned()
    monkeypatch.setenv("AUTOTUNE_DISABLE", "00")  # zero: off, so the key is tuned
    tuned(*_args())
    assert tried
    monkeypatch.setenv("AUTOTUNE_DISABLE", "\u0660")  # an Arabic-Indic zero: neither, not "a number, so on"
    with pytest.raises(OptionError, match=r"neither on nor off"):
        _tuned()[0](*_args(50))


@pytest.mark.parametrize("name", ["AUTOTUNE_OFFLINE", "AUTOTUNE_FORCE", "AUTOTUNE_DISABLE"])
def test_a_misspelt_env_switch_is_refused_naming_the_values_not_read_as_on(monkeypatch, name):
    tuned, tried = _tuned()
    monkeypatch.setenv(name, "flase")
    with pytest.raises(OptionError, match=rf"{name}='flase' is neither on nor off; set {name}=1 \(on\) or {name}=0"):
        tuned(*_args())
    assert tried == []
    monkeypatch.setenv(name, "off")
    tuned(*_args())
    assert tried, "off means off: the key is tuned"


def test_an_env_lock_timeout_over_a_day_is_refused_as_the_tuning_field_is(monkeypatch):
    from autotune.options import lock_timeout_s

    monkeypatch.setenv("AUTOTUNE_LOCK_TIMEOUT_S", "1e300")
    with pytest.raises(OptionError, match=r"AUTOTUNE_LOCK_TIMEOUT_S='1e300' .* at most 86400"):
        lock_timeout_s()
    monkeypatch.setenv("AUTOTUNE_LOCK_TIMEOUT_S", "30")
    assert lock_timeout_s() == 30.0


def test_a_bare_autotune_without_arguments_says_to_give_them():
    with pytest.raises(SpaceError, match=r"@autotune takes arguments: write @autotune\(space=\.\.\."):
        autotune(add_kernel)


def test_a_reference_with_no_function_or_a_bad_tolerance_is_refused_when_made():
    with pytest.raises(OptionError, match=r"takes the reference function.*got int: 5"):
        Reference(5, outputs=("out",))
    with pytest.raises(OptionError, match=r"Reference\(atol='a'\): a tolerance is a finite number >= 0"):
        Reference(lambda **_: None, outputs=("out",), atol="a")
    with pytest.raises(OptionError, match=r"Reference\(rtol=-1\)"):
        Reference(lambda **_: None, outputs=("out",), rtol=-1)


def test_decorator_arguments_of_the_wrong_form_name_the_argument_and_the_form():
    with pytest.raises(OptionError, match=r"fallback= on add_kernel takes one config as a dict.*got int: 5"):
        _tuned(fallback=5)
    with pytest.raises(
        SpaceError,
        match=r"lacks the space's fields \['BLOCK'\]; give a value for each, e.g. "
        r"fallback=\{'BLOCK': 16\}\. 'BLOK' is not a field of the space\. "
        r"Did you mean 'BLOCK'\?",
    ):  # the example corrects the name, keeps the value
        _tuned(fallback={"BLOK": 16})
    with pytest.raises(OptionError, match=r"derive= on add_kernel takes a dict.*got list"):
        _tuned(space={"num_warps": (1, 2)}, grid="(1,)", derive=["BLOCK"])
    with pytest.raises(OptionError, match=r"restore_value= on add_kernel takes a list of argument names"):
        _tuned(restore_value=5)
    with pytest.raises(
        OptionError,
        match=r"reset_to_zero=\['BLOCK'\] on add_kernel: 'BLOCK' is set for each config "
        r"by the space",
    ):
        _tuned(reset_to_zero=["BLOCK"])


def test_a_bare_string_restore_value_is_one_name_not_its_letters():
    tuned, _ = _tuned(restore_value="out")
    assert tuned.restore_value == ("out",)


@pytest.mark.parametrize(
    "options",
    [{"restore_value": ["n"]}, {"reset_to_zero": ("n",)}, {"verify": Reference(lambda **_: 0, outputs=("n",))}],
)
def test_a_guarded_argument_the_call_passes_as_a_non_tensor_is_named_before_any_config_runs(options):
    tuned, tried = _tuned(**options)
    with pytest.raises(OptionError, match=r"the call passed n as int 40, not a tensor.*drop 'n' from"):
        tuned(*_args())
    assert tried == []


def test_prune_returning_none_is_named():
    tuned, tried = _tuned(prune=lambda configs, named: None)
    with pytest.raises(OptionError, match=r"prune= on add_kernel returned None; return the configs to keep"):
        tuned(*_args())
    assert tried == []


def test_a_prune_of_the_wrong_shape_is_named_at_decoration_or_at_its_first_return():
    """A prune that cannot take (configs, named_args) failed every call with a bare TypeError that never named
    prune=; one returning a single config, with "dictionary update sequence element #0"."""
    for prune, what in (
        (lambda configs: configs, r"prune="),
        ({"early_config_prune": lambda configs: configs}, r"prune=\{'early_config_prune': \.\.\.\}"),
    ):
        with pytest.raises(
            OptionError,
            match=what + r" on this @autotune is called as fn\(configs, named_args\).*its "
            r"signature \(configs\) cannot take that",
        ):
            _tuned(prune=prune)
    _tuned(prune=lambda configs, named, **extra: configs)  # what a call passes fits: accepted
    tuned, tried = _tuned(prune=lambda configs, named: configs[0])
    with pytest.raises(
        OptionError,
        match=r"prune= on add_kernel returned Config Config\(BLOCK=\d+\), not a list of "
        r"configs: .*`\[config\]` for one",
    ):
        tuned(*_args())
    assert tried == []
    with pytest.raises(OptionError, match=r"top_k must be either"):  # an OptionError (and Triton's TypeError)
        _tuned(prune={"perf_model": lambda **_: 1.0, "top_k": 1.5})


def test_a_triton_style_perf_model_gets_the_config_options_triton_gives_it():
    """`prune={"perf_model": ...}` is called as Triton calls it: the call's arguments and the config's options, the
    decorator's static options and a triton.Config's unset ones (num_warps, num_stages, num_ctas) among them."""
    seen = []

    def estimate(x, y, out, n, BLOCK, num_warps, num_stages, num_ctas, **_):
        seen.append((BLOCK, num_warps, num_stages, num_ctas))
        return BLOCK  # the smallest block is "fastest"

    tuned, tried = _tuned(prune={"perf_model": estimate, "top_k": 1}, num_warps=8)
    tuned(*_args())
    assert sorted(seen) == [(16, 8, 3, 1), (32, 8, 3, 1)]
    assert tried == [] and tuned.best_config["BLOCK"] == 16  # one config left: launched, nothing to measure


def test_a_perf_model_that_cannot_take_the_configs_options_is_an_option_error_naming_prune():
    tuned, tried = _tuned(prune={"perf_model": lambda BLOCK, n: BLOCK, "top_k": 1})
    with pytest.raises(OptionError, match=r"prune=\{'perf_model': \.\.\.\} on add_kernel .*give it \*\*kwargs"):
        tuned(*_args())
    assert tried == []


@pytest.mark.parametrize(
    "grid, message",
    [
        (5, r"add_kernel\[5\]: a grid is a tuple of 1 to 3 ints, e\.g\. add_kernel\[\(5,\)\]"),
        ("(1,)", r"a \$X grid string goes in @autotune\(grid='\(1,\)'\)"),
        ((1, 1, 1, 1), r"a grid has 1 to 3 dimensions"),
        (
            lambda: (1,),
            r"add_kernel\[grid\]: a grid callable is called with one argument, META .*its signature \(\) "
            r"cannot take that",
        ),
    ],
)
def test_a_bad_triton_style_grid_is_refused_before_tuning_not_blamed_on_every_config(grid, message):
    tuned, tried = _tuned(grid=None)
    with pytest.raises(ExpressionError, match=message):
        tuned[grid](*_args())
    assert tried == []
    x, y, out, n = _args()
    tuned[(2,)](x, y, out, n)
    assert torch.equal(out, x + y)
    with pytest.raises(ExpressionError, match=message):  # a memory hit now: the same words, not Triton's raw error
        tuned[grid](*_args())


def test_every_new_error_is_an_autotune_error_and_a_builtin_one():
    for cls in (OptionError, SpaceError, ExpressionError):
        assert issubclass(cls, AutotuneError) and issubclass(cls, ValueError)


@pytest.mark.parametrize("args", [{"x": 1}, torch.ones(4)])
def test_autotune_launch_args_that_are_not_a_sequence_are_named_not_spread(args):
    """Refused before a wrapper is made and kept for the rest of the process."""
    from autotune import autotune_launch
    from autotune.decorator.functional import _launch_registry

    kept = len(_launch_registry)
    with pytest.raises(
        CallError,
        match=r"autotune_launch\(args=\.\.\.\) takes the kernel's positional arguments as "
        r"a tuple or list.*keyword arguments go in kwargs=",
    ):
        autotune_launch(add_kernel, space={"BLOCK": (16, 32)}, grid=GRID, key=["n"], args=args, tuning=FAST)
    assert len(_launch_registry) == kept


def test_autotune_launch_mistakes_name_autotune_launch_not_the_decorator():
    from autotune import autotune_launch

    x = torch.ones(8)
    launch = dict(space={"BLOCK": (16, 32)}, key=["n"], args=(x, x, torch.empty_like(x), 8))
    with pytest.raises(CallError, match=r"autotune_launch\(\.\.\.\) needs grid=: a tuple"):
        autotune_launch(add_kernel, tuning=FAST, **launch)
    with pytest.raises(CallError, match=r"autotune_launch\(kernel, \.\.\.\) takes a @triton.jit kernel"):
        autotune_launch(lambda: None, grid=GRID, tuning=FAST, **launch)
    with pytest.raises(OptionError, match=r"isolate is a Tuning field: pass tuning=Tuning\(isolate=\.\.\.\)"):
        autotune_launch(add_kernel, grid=GRID, isolate="off", **launch)


def test_a_grid_passed_to_a_call_is_refused_with_the_indexing_form():
    tuned = autotune(space={"BLOCK": (16, 32)}, key=["n"], grid=GRID, tuning=FAST)(add_kernel)
    x = torch.ones(8)
    with pytest.raises(
        CallError,
        match=r"add_kernel\(\.\.\., grid=\.\.\.\): grid is not an argument of "
        r"add_kernel; launch it as add_kernel\[grid\]\(\.\.\.\)",
    ):
        tuned(x, x, torch.empty_like(x), 8, grid=(1,))
    tuned[(1,)](x, x, out := torch.empty_like(x), 8)
    assert torch.equal(out, x + x)


@pytest.mark.parametrize("command", [["list"], ["show", "add_kernel"], ["clear"]])
def test_a_remote_url_on_a_disk_command_is_a_usage_error_not_silently_ignored(command, tmp_path):
    import subprocess
    import sys

    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "cache",
            *command,
            "--cache-dir",
            str(tmp_path),
            "--remote-url",
            "redis://127.0.0.1:1/0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith(f"autotune cache {command[0]}: --remote-url is used with --remote"), res.stderr
    assert "no entries" not in res.stdout


def test_a_verify_that_returns_none_is_an_option_error_not_every_config_failing_verification():
    def outputs_right(out, x, y, **_):
        torch.allclose(out, x + y)  # the `return` forgotten

    tuned, tried = _tuned(verify=outputs_right)
    with pytest.raises(OptionError, match=r"verify= \(outputs_right\) returned None .*a missing `return`"):
        tuned(*_args())
    assert len(tried) == 1  # stopped at the first config, nothing blamed on the others
    assert tuned.cache_info()["entries"] == 0


def test_a_verify_that_returns_an_elementwise_tensor_is_an_option_error_not_every_config_failing():
    tuned, tried = _tuned(verify=lambda out, x, y, **_: out == x + y)  # the `.all()` forgotten
    with pytest.raises(
        OptionError,
        match=r"verify= \(<lambda>\) returned a tensor of 40 elements instead of True or "
        r"False: reduce it .*\.all\(\)",
    ):
        tuned(*_args())
    assert len(tried) == 1 and tuned.cache_info()["entries"] == 0
    one, _ = _tuned(verify=lambda out, x, y, **_: (out == x + y).all())  # a one-element tensor is an answer
    one(*_args())
    assert one.cache_info()["entries"] == 1


def test_a_do_bench_that_cannot_take_the_function_to_time_is_refused_at_decoration():
    with pytest.raises(OptionError, match=r"do_bench= on add_kernel is called as do_bench\(fn\).*\(fn, rep\)"):
        _tuned(do_bench=lambda fn, rep: 1.0)
    _tuned(do_bench=lambda fn, rep=10: 1.0)  # a default for the rest is fine


@pytest.mark.parametrize(
    "returned",
    [lambda: np.float32(1.5), lambda: torch.tensor(1.5), lambda: torch.tensor([1.5, 2.0])],
    ids=["numpy", "0-d tensor", "tensor of samples"],
)
def test_a_do_bench_returning_numpy_or_torch_numbers_is_timed(returned):
    tuned, tried = _tuned(do_bench=lambda fn: (fn(), returned())[1])
    tuned(*_args())
    assert tried and tuned.record().trial_for(tuned.best_config).median_ms in (1.5, 1.75)


@pytest.mark.parametrize(
    "returned", ["fast", None, [], [True], [np.bool_(True)]], ids=["str", "None", "empty", "bool", "np.bool_"]
)
def test_a_do_bench_returning_no_time_is_an_option_error_naming_do_bench(returned):
    tuned, _ = _tuned(do_bench=lambda fn: (fn(), returned)[1])
    with pytest.raises(OptionError, match=r"do_bench= returned .*: it must return the time in milliseconds"):
        tuned(*_args())


@pytest.mark.parametrize("name, value, reading", [("AUTOTUNE_PROGRESS", "of", True), ("AUTOTUNE_PRINT", "verbose", 1)])
def test_a_display_switch_not_understood_warns_once_naming_the_values(monkeypatch, name, value, reading):
    """Display switches are read after a tuning (an error there would throw it away): a value neither on nor off
    warns, once per value, saying how it was read, instead of being read silently."""
    from autotune.options import env_print_level, env_progress

    read = env_progress if name == "AUTOTUNE_PROGRESS" else env_print_level
    monkeypatch.setenv(name, f"{value}-{id(monkeypatch)}")  # a value no earlier test warned about
    with pytest.warns(UserWarning, match=rf"{name}='{value}-\d+' is not understood; read as .*or unset it"):
        assert read() == reading
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read() == reading  # once per value
    monkeypatch.setenv(name, "0")
    assert read() in (False, 0)


def test_every_environment_variable_autotune_reads_is_listed_as_one_it_knows():
    import re
    from pathlib import Path

    from autotune.options import ENV_NAMES

    package = Path(__file__).resolve().parents[1] / "autotune"
    read = {name for path in package.rglob("*.py") for name in re.findall(r"AUTOTUNE_[A-Z_0-9]+", path.read_text())}
    assert read == ENV_NAMES


@pytest.mark.parametrize(
    "name, meant", [("AUTOTUNE_OFFLNE", "AUTOTUNE_OFFLINE"), ("AUTOTUNE_cache_dir", "AUTOTUNE_CACHE_DIR")]
)
def test_a_misspelt_autotune_variable_is_warned_once_naming_the_one_meant(monkeypatch, name, meant):
    """A misspelt switch (AUTOTUNE_OFFLNE=1 in production) was ignored without a word; a project's own AUTOTUNE_*
    variable, close to none of autotune's, is left alone."""
    monkeypatch.setenv(name, "1")
    monkeypatch.setenv("AUTOTUNE_MY_PROJECT_SETTING", "1")
    with pytest.warns(
        UserWarning,
        match=rf"environment variable {name} is not one autotune reads, so it has no "
        rf"effect. Did you mean '{meant}'\?",
    ) as caught:
        _tuned()
    assert len([w for w in caught if "environment variable" in str(w.message)]) == 1
    assert caught[0].filename == __file__  # the user's line, not autotune's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _tuned()  # once per name and process


def test_a_refinement_asked_for_with_no_rounds_is_refused_naming_where_the_zero_came_from():
    """refine_topk=3 with refine_reps=0 (given, or the fast preset's) re-measured nothing without a word."""
    from autotune import Tuning

    with pytest.raises(
        OptionError,
        match=r"refine_topk=3 asks to re-measure the best 3 configs, but refine_reps=0 "
        r"re-measures none; give refine_reps >= 1",
    ):
        Tuning(refine_topk=3, refine_reps=0)
    with pytest.raises(OptionError, match=r"but the fast preset's refine_reps=0 re-measures none"):
        Tuning(preset="fast", refine_topk=3)
    assert Tuning(preset="fast").refine_topk == 0  # the preset alone: no refinement, by design
    assert Tuning(preset="fast", refine_topk=3, refine_reps=5).refine_reps == 5


def test_a_tuning_sent_to_a_worker_or_copied_keeps_which_preset_fields_were_given():
    import copy
    import pickle

    tuning = Tuning(preset="fast", reps=7)
    for made in (pickle.loads(pickle.dumps(tuning)), copy.copy(tuning), copy.deepcopy(tuning)):
        assert made == tuning and made.explicit_fields() == {"reps"}
        thorough = made.replace(preset="thorough")
        assert thorough.reps == 7 and thorough.warmup == Tuning(preset="thorough").warmup


def test_a_projects_own_autotune_variable_near_a_name_only_by_the_prefix_is_left_alone(monkeypatch):
    """AUTOTUNE_REMOTE or AUTOTUNE_DEVICE (a project's own settings) shared only the AUTOTUNE_ prefix with a name
    autotune reads, which was enough to be warned of (AUTOTUNE_REMOTE was told "Did you mean AUTOTUNE_MODE?")."""
    for name in ("AUTOTUNE_REMOTE", "AUTOTUNE_DEVICE", "AUTOTUNE_OFFLINE_DIR"):
        monkeypatch.setenv(name, "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _tuned()


@pytest.mark.parametrize("raw", ["-1", "1_0", "\u0662"])
def test_autotune_print_that_is_not_a_plain_level_is_warned_of(monkeypatch, raw):
    """int() reads "-1" (then taken as 0, silent), "1_0" (10) and other scripts' digits: none is a level."""
    from autotune.options import env_print_level

    monkeypatch.setenv("AUTOTUNE_PRINT", raw)
    with pytest.warns(UserWarning, match="AUTOTUNE_PRINT"):
        assert env_print_level() == 1
