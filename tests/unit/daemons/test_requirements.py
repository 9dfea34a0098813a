"""A topology's requirements file: which one a bundle ships, and what a supervisor installs."""
import pytest

from squall.daemons.requirements import (
    RequirementsError,
    check_path,
    check_requirements,
    default_file,
    environment_key,
)


def test_plain_requirements_pass_normalized():
    text = b"""# pinned by hand
redis==2.10.1
requests[socks, security] >=2.0,<3  # a comment after it
tomli ; python_version < "3.11"
six==1.16.0 \\
    --hash=sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254

"""
    assert check_requirements(text, "requirements.txt") == [
        "redis==2.10.1", "requests[security,socks]>=2.0,<3", 'tomli ; python_version < "3.11"',
        "six==1.16.0 --hash=sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254"]
    assert check_requirements(b"Py_Yaml [Socks] == 6.0", "r.txt") == ["py-yaml[socks]==6.0"]


@pytest.mark.parametrize("line", [
    "-i https://evil.example/simple", "--extra-index-url https://evil.example/simple", "-f /tmp/wheels",
    "--find-links=/tmp", "-r other.txt", "-c constraints.txt", "-e git+https://example.com/x.git#egg=x",
    "git+https://example.com/x.git", "x @ https://example.com/x-1.0.tar.gz", "./local_project", "/abs/path",
    "../up", "pkg-1.0-py3-none-any.whl", "thing.tar.gz", "--trusted-host example.com", "name==1.0 --pre",
])
def test_options_urls_and_paths_are_refused_naming_the_line(line):
    with pytest.raises(RequirementsError, match=r"virtualenvs/wc.txt line 2: .* is not a plain requirement"):
        check_requirements(f"six==1.16.0\n{line}\n".encode(), "virtualenvs/wc.txt")


def test_bounds_and_text():
    with pytest.raises(RequirementsError, match="more than 65536"):
        check_requirements(b"a\n" * 40_000, "r.txt")
    with pytest.raises(RequirementsError, match="more than 500"):
        check_requirements(b"a\n" * 501, "r.txt")
    with pytest.raises(RequirementsError, match="not UTF-8"):
        check_requirements(b"\xff\xfe", "r.txt")


def test_which_file_a_bundle_ships():
    assert default_file(["requirements.txt", "virtualenvs/wc.txt"], "wc", streamparse=True) == "virtualenvs/wc.txt"
    assert default_file(["requirements.txt", "virtualenvs/wc.txt"], "wc", streamparse=False) == "requirements.txt"
    assert default_file(["virtualenvs/other.txt"], "wc", streamparse=True) is None
    assert check_path("./virtualenvs//wc.txt") == "virtualenvs/wc.txt"
    for bad in ("", "/etc/passwd", "../x.txt", "a/../../x", ".."):
        with pytest.raises(RequirementsError, match="inside the topology's folder"):
            check_path(bad)


def test_the_cache_key_follows_what_the_environment_is_built_from():
    base = (["vpkg==1.0"], "/usr/bin/python3", "3.11.2", [], ["/site"])
    key = environment_key(*base)
    assert key == environment_key(*base) and len(key) == 32
    assert key != environment_key(["vpkg==2.0"], *base[1:])
    assert key != environment_key(*base[:3], ["--no-index"], base[4])
