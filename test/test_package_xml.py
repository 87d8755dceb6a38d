"""package.xml names only resolvable rosdep keys and declares every module the package imports.

`rosdep install --from-paths . -y` stops at the first key it cannot resolve, and a module imported
but not declared fails only at run time on a fresh machine; both are checked here statically.
"""
from __future__ import annotations

import ast
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / 'data'
SOURCES = [*sorted((ROOT / 'alpamayo_offload').rglob('*.py')),
           *sorted((ROOT / 'launch').glob('*.py'))]
DEPEND_TAGS = ('depend', 'build_depend', 'buildtool_depend', 'build_export_depend', 'exec_depend',
               'test_depend', 'doc_depend')

# Imported top-level module -> the rosdep key (rosdep/python.yaml) that installs it. ROS packages
# are imported under their package name and need no entry (test/data/ros-packages.txt).
MODULE_KEYS = {
    'cv2': 'python3-opencv',
    'matplotlib': 'python3-matplotlib',
    'numpy': 'python3-numpy',
    'PIL': 'python3-pil',
    'rosbags': 'python3-rosbags-pip',
    'tqdm': 'python3-tqdm',
    'yaml': 'python3-yaml',
}
# Modules installed with pip (README, "Install"), never through package.xml; value: the reason.
PIP_ONLY = {
    'torch': 'python3-torch is a distro torch far older than torch>=2.4; the CUDA build is chosen '
             'at pip install time',
    'transformers': 'the Qwen3-VL classes need the 5.x API, which a rosdep pip key cannot pin',
    'safetensors': 'no rosdep key',
    'tokenizers': 'no rosdep key',
    'mcap': 'no rosdep key (replay reads mcap files a killed recorder left without a summary)',
}
# Optional extras, imported only where a feature asks for them (with a clear error otherwise).
OPTIONAL = {
    'torchvision': "images.decoder: gpu (nvJPEG); comes with the CUDA torch wheel",
    'ray': "alpamayo-offload replay --ray: the setup.py extra 'ray'",
    'nvidia': "nvCOMP for compressed streaming (EngineConfig.compression): the setup.py extra "
              "'nvcomp'",
}


def _names(path: Path) -> set[str]:
    lines = path.read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith('#')}


def _dependencies() -> dict[str, set[str]]:
    root = ET.parse(ROOT / 'package.xml').getroot()
    return {tag: {e.text.strip() for e in root.iter(tag)} for tag in DEPEND_TAGS}


def _third_party_imports() -> dict[str, str]:
    """Top-level third-party module -> first file importing it (absolute imports only)."""
    found: dict[str, str] = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split('.')[0]
                if top not in sys.stdlib_module_names and top != 'alpamayo_offload':
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_key_list_names_its_rosdistro_snapshot() -> None:
    header = (DATA / 'rosdep-keys.txt').read_text().splitlines()[0]
    assert 'ros/rosdistro' in header and 'snapshot' in header, header


def test_every_dependency_is_a_rosdep_key_or_a_ros_package() -> None:
    known = _names(DATA / 'rosdep-keys.txt') | _names(DATA / 'ros-packages.txt')
    unknown = {f'<{tag}>{key}' for tag, keys in _dependencies().items() for key in keys
               if key not in known}
    assert not unknown, f'not resolvable by rosdep on Humble/Jazzy: {sorted(unknown)}'


def test_every_imported_module_is_declared_or_pip_only() -> None:
    ros_packages = _names(DATA / 'ros-packages.txt')
    run_time = _dependencies()['exec_depend'] | _dependencies()['depend']
    problems = []
    for module, where in sorted(_third_party_imports().items()):
        if module in PIP_ONLY or module in OPTIONAL:
            continue
        key = module if module in ros_packages else MODULE_KEYS.get(module)
        if key is None:
            problems.append(f'{module} ({where}): no rosdep key in MODULE_KEYS, not PIP_ONLY')
        elif key not in run_time:
            problems.append(f'{module} ({where}): <exec_depend>{key}</exec_depend> missing')
    assert not problems, '\n'.join(problems)


def test_pip_only_modules_stay_out_of_package_xml_and_are_in_setup_py() -> None:
    declared = set().union(*_dependencies().values())
    assert not {k for k in declared if any(m in k for m in PIP_ONLY)}, declared
    setup = ast.parse((ROOT / 'setup.py').read_text())
    requires = next(node.value for node in ast.walk(setup) if isinstance(node, ast.keyword)
                    and node.arg == 'install_requires')
    names = {ast.literal_eval(e).split('>')[0].split('<')[0].split('=')[0]
             for e in requires.elts}
    assert set(PIP_ONLY) <= names, names


def test_the_import_walk_sees_the_package() -> None:
    """The checks above would pass vacuously if the walk found nothing."""
    found = _third_party_imports()
    assert {'rclpy', 'numpy', 'torch', 'launch'} <= set(found), found
