"""The instrument proves itself (SPEC §8): every planted defect, one at a time, must make it
report UNEXPECTED. A plant that goes unnoticed fails the suite."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from echomq import module_path
from echomq.parity.__main__ import first_catch
from echomq.parity.plants import FAMILIES, NATIVE_PLANTS, SCRIPT_PLANTS, planted_module_path
from echomq.parity.runner import Pair
from echomq._protocol.verbs import BY_NAME

pytestmark = pytest.mark.slow  # a planted build of trafikey, and every plant caught

CRATE = Path(__file__).resolve().parents[1] / "trafikey"


@pytest.fixture(scope="module")
def pair():
    with Pair(module=module_path()) as pair:
        yield pair


@pytest.fixture(scope="module")
def planted_module():
    """Build (or bring up to date) the planted variant in its own target dir; the release .so is untouched."""
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo/bin/cargo")
    if Path(cargo).exists():
        subprocess.run([cargo, "build", "--release", "--quiet", "--features", "planted",
                        "--target-dir", str(CRATE / "target" / "planted")], cwd=CRATE, check=True)
    path = planted_module_path()
    if path is None:
        pytest.fail("no planted trafikey build and no cargo to make one")
    return path


@pytest.mark.parametrize("plant", SCRIPT_PLANTS, ids=lambda p: p.name)
def test_script_plant_is_caught(pair, plant):
    pair.set_script_plants([plant])
    try:
        caught = first_catch(pair, plant)
    finally:
        pair.set_script_plants([])
    assert caught != "NOT CAUGHT", f"{plant.name} ({plant.what}) went unnoticed"


@pytest.mark.parametrize("plant", NATIVE_PLANTS, ids=lambda p: p.name)
def test_native_plant_is_caught(planted_module, plant):
    with Pair(module=planted_module, plant=plant.name) as pair:
        caught = first_catch(pair, plant)
    assert caught != "NOT CAUGHT", f"{plant.name} ({plant.what}) went unnoticed"


def test_the_planted_build_with_no_plant_on_is_clean(planted_module):
    with Pair(module=planted_module) as pair:
        assert first_catch(pair) == "NOT CAUGHT"


def test_every_family_has_a_plant_on_each_side():
    assert {p.family for p in SCRIPT_PLANTS} == set(FAMILIES)
    assert {p.family for p in NATIVE_PLANTS} == set(FAMILIES)


def test_the_release_build_contains_no_plant():
    """The plants live behind the cargo feature `planted`, which is not a default feature."""
    features = tomllib.loads((CRATE / "Cargo.toml").read_text())["features"]
    assert features["planted"] == [] and "planted" not in features.get("default", [])
    release = Path(module_path()).read_bytes()
    for plant in NATIVE_PLANTS:
        assert plant.name.encode() not in release, plant.name
    assert b"TRAFIKEY_PLANT" not in release


def test_every_native_plant_is_still_in_the_crate():
    """The instrument's list of native plants is the crate's (trafikey/src/plant.rs, PLANTS), each keyed to
    the verb the instrument searches with first."""
    source = (CRATE / "src" / "plant.rs").read_text()
    table = source[source.index("pub static PLANTS"):source.index("static SWITCHED_ON")]
    rows = dict(re.findall(r'name: "([^"]+)",\s*verbs: ([^\n]+)\n', table))
    claims = re.search(r"const CLAIMS: &\[&str\] = (&\[[^\]]*\]);", source).group(1)
    assert set(rows) == {plant.name for plant in NATIVE_PLANTS}
    for plant in NATIVE_PLANTS:
        verbs = claims if rows[plant.name] == "CLAIMS," else rows[plant.name]
        assert f'"{BY_NAME[plant.verb].command}"' in verbs, plant.name


def test_plants_alter_a_plan_at_one_point():
    """No verb body knows of plants: the crate mentions them only where they are declared (lib.rs), where
    they live (plant.rs), and at the one hook that carries out every write plan (host.rs, Host::apply)."""
    mentions = {path.relative_to(CRATE / "src").as_posix() for path in (CRATE / "src").rglob("*.rs")
                if path.name != "plant.rs" and re.search(r'feature = "planted"|plant::', path.read_text())}
    assert mentions == {"lib.rs", "host.rs"}
    host = (CRATE / "src" / "host.rs").read_text()
    assert host.count('#[cfg(feature = "planted")]') == 2  # the plan altered, then used
    hook = host.index("crate::plant::alter(")
    assert host.rindex("pub fn ", 0, hook) == host.index("pub fn apply(")
