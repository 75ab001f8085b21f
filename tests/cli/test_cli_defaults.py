"""The training flags' defaults are stated once, in each domain's DEFAULT_TRAIN, and --help shows them."""

import pytest
import typer

from promokit.cli import app
from promokit.cli.options.common import TRAINING_FLAGS

DOMAINS = ("conversion", "voucher", "incentive", "value")


def _commands():
    root = typer.main.get_command(app)
    for domain in DOMAINS:
        group = root.commands[domain]
        for name, command in group.commands.items():
            yield domain, name, command


@pytest.mark.parametrize("domain", DOMAINS)
def test_training_flags_show_the_domain_default(domain):
    import importlib

    from promokit.experiments.voucher.settings import DEMO_TRAIN

    default = importlib.import_module(f"promokit.{domain}.defaults").DEFAULT_TRAIN
    own = {("voucher", "bench"): DEMO_TRAIN}  # the commands that train with other settings than the estimator's
    checked = 0
    for command_domain, name, command in _commands():
        if command_domain != domain or name in ("demo",):
            continue
        expected = own.get((domain, name), default)
        for param in command.params:
            if param.name in TRAINING_FLAGS:
                assert param.default is None, (name, param.name)  # not given: the library's default
                assert param.show_default == f"{getattr(expected, param.name):g}", (name, param.name)
                checked += 1
    assert checked >= 4  # train's epochs, batch size, lr and patience at least


def test_a_flag_not_given_trains_with_the_domain_default(tmp_path):
    from promokit.cli.support import training_options
    from promokit.incentive.defaults import DEFAULT_TRAIN

    config, params = training_options(DEFAULT_TRAIN, None, epochs=None, lr=0.01)
    assert config.epochs == DEFAULT_TRAIN.epochs and config.lr == 0.01 and params == {}


def test_help_prints_the_default():
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["incentive", "train", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    line = next(line for line in result.output.splitlines() if "--epochs" in line)
    assert "[default: (30)]" in line
