"""playbooks/provision.yml on rehearsal boxes: CUDA toolkit from the stand-in repo, stand-in sglang from a wheelhouse."""

from __future__ import annotations

import json

from tests.rehearsal import gpu_host
from tests.rehearsal.playbook import run_playbook
from tests.rehearsal.standin import FLAGS, write_simulation


def read_json(box, path: str) -> dict:
    return json.loads(box.run("sudo", "cat", path).stdout)


def test_a_fresh_box_gets_the_toolkit_the_venv_and_a_record_of_both(provisioned):
    box = provisioned.box
    assert "release 13.0," in box.run("/usr/local/cuda-13.0/bin/nvcc", "--version").stdout
    gpus = read_json(box, "/etc/ansible/facts.d/sglang_gpus.fact")
    assert (gpus["count"], gpus["memory_gib"], gpus["driver_version"]) == (8, 94.97, "580.95.05")
    assert (gpus["compute_capability"], gpus["pcie_gen"], gpus["pcie_width"]) == ("12.0", 5, 16)
    assert read_json(box, "/etc/ansible/facts.d/cuda_toolkit.fact")["home"] == "/usr/local/cuda-13.0"

    record = read_json(box, "/etc/ansible/facts.d/sglang_venv.fact")
    installed = record["versions"]["0.5.23"]
    assert installed["installed_version"] == "0.5.23+standin"
    assert installed["venv"] == "/opt/sglang/venv-0.5.23" and installed["python_version"] == "3.11"
    version = box.run(installed["python"], "-c", "import sglang; print(sglang.__version__)").stdout.strip()
    assert version == "0.5.23+standin"

    # The flag table was read from the installed package's own --help: the same flags as the reference.
    table = read_json(box, installed["flag_table"])
    reference = json.loads(FLAGS.read_text())
    assert table["sglang_version"] == "0.5.23+standin"
    assert {tuple(o["names"]) for o in table["options"]} == {tuple(o["names"]) for o in reference["options"]}

    # Root owns the code; the service runs as a nologin system user in the GPU groups.
    assert box.run("stat", "-c", "%U", "/opt/sglang/venv-0.5.23/bin/python3").stdout.strip() == "root"
    user = box.run("getent", "passwd", "sglang").stdout.strip().split(":")
    assert user[5:] == ["/var/lib/sglang", "/usr/sbin/nologin"] and int(user[2]) < 1000
    assert set(box.run("id", "-nG", "sglang").stdout.split()) >= {"sglang", "video", "render"}
    assert box.run("stat", "-c", "%U", "/var/lib/sglang").stdout.strip() == "sglang"


def test_a_second_run_changes_nothing(provisioned):
    again = provisioned.playbook("playbooks/provision.yml")
    assert again.returncode == 0, again.output[-3000:]
    assert again.changed(provisioned.box.name) == 0, again.stdout


def test_check_diff_on_a_provisioned_box_changes_nothing(provisioned):
    checked = provisioned.playbook("playbooks/provision.yml", "--check", "--diff")
    assert checked.returncode == 0, checked.output[-3000:]
    assert checked.changed(provisioned.box.name) == 0, checked.stdout


def test_check_on_a_fresh_box_does_not_fail_and_touches_nothing(box, cuda_repo, tmp_path):
    inventory = gpu_host.prepare(box, tmp_path, cuda_repo.base_url)
    checked = run_playbook("playbooks/provision.yml", inventory, None, "--check", "--diff")
    assert checked.returncode == 0, checked.output[-3000:]
    assert checked.changed(box.name) > 0
    for path in ("/etc/ansible", "/opt/sglang", "/usr/local/cuda-13.0", "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"):
        assert box.run("test", "-e", path, check=False).returncode == 1, f"{path} was created in check mode"
    assert box.run("getent", "passwd", "sglang", check=False).returncode == 2


def test_an_old_driver_is_refused_before_anything_is_installed(box, cuda_repo, tmp_path):
    inventory = gpu_host.prepare(box, tmp_path, cuda_repo.base_url)
    write_simulation(box.root / "etc" / "sglang-standin.json", gpu_count=8, gpu_memory_gib=94.97, driver_version="550.54.15")
    run = run_playbook("playbooks/provision.yml", inventory)
    assert run.returncode != 0
    assert "driver on" in run.stdout and "is 550.54.15" in run.stdout and "580.65.06 or newer" in run.stdout
    assert "nothing was installed" in run.stdout
    assert box.run("test", "-e", "/etc/apt/sources.list.d/cuda-debian12-x86_64.list", check=False).returncode == 1


def test_no_driver_is_said_and_the_toolkit_still_installs_unless_required(box, cuda_repo, tmp_path):
    inventory = gpu_host.prepare(box, tmp_path, cuda_repo.base_url, cuda_toolkit_driver_required=True)
    box.run("sudo", "rm", "/usr/local/bin/nvidia-smi")
    run = run_playbook("playbooks/provision.yml", inventory)
    assert run.returncode != 0
    assert "nvidia-smi did not answer" in run.stdout and "Install NVIDIA's driver (R580 or newer)" in run.stdout


def test_an_unreachable_repository_is_explained(box, cuda_repo, tmp_path):
    inventory = gpu_host.prepare(box, tmp_path, cuda_repo.base_url, cuda_toolkit_repo_base_url="http://127.0.0.1:9/cuda/repos")
    run = run_playbook("playbooks/provision.yml", inventory)
    assert run.returncode != 0
    assert "Could not install http://127.0.0.1:9/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb" in run.stdout
    assert "set cuda_toolkit_repo_base_url to a reachable mirror" in run.stdout


def test_a_pinned_toolkit_is_held_and_a_missing_or_old_python_is_explained(box, cuda_repo, tmp_path):
    fake = "printf '#!/bin/sh\\necho 3.9\\n' > /usr/local/bin/python3.9 && chmod +x /usr/local/bin/python3.9"
    box.run("sudo", "sh", "-c", fake)
    inventory = gpu_host.prepare(
        box, tmp_path, cuda_repo.base_url, cuda_toolkit_package_version="13.0.0-1", sglang_venv_python="/usr/local/bin/python3.9"
    )
    old = run_playbook("playbooks/provision.yml", inventory)
    assert old.returncode != 0
    assert "needs Python 3.11 to 3.13 with venv" in old.stdout and "is Python 3.9" in old.stdout
    assert "set sglang_venv_python" in old.stdout
    assert box.run("dpkg", "--get-selections", "cuda-toolkit-13-0").stdout.split() == ["cuda-toolkit-13-0", "hold"]
    assert box.run("test", "-e", "/opt/sglang/venv-0.5.23", check=False).returncode == 1

    missing = run_playbook("playbooks/provision.yml", inventory, {"sglang_venv_python": "python3.10"})
    assert missing.returncode != 0
    assert "`python3.10` did not run" in missing.stdout


def test_model_files_from_the_controller_are_copied_once(provisioned, tmp_path):
    source = tmp_path / "tiny-model"
    source.mkdir()
    (source / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (source / "model.safetensors").write_bytes(b"\0" * 4096)
    settings = {
        "sglang_model_source": "controller",
        "sglang_model_controller_path": str(source),
        "sglang_model_dest": "/srv/models/tiny",
    }
    first = provisioned.playbook("playbooks/provision.yml", extra_vars=settings)
    assert first.returncode == 0, first.output[-3000:]
    assert first.changed(provisioned.box.name) > 0
    box = provisioned.box
    assert box.run("runuser", "-u", "sglang", "--", "cat", "/srv/models/tiny/config.json", user="root").stdout.startswith("{")
    assert box.run("sudo", "cat", "/srv/models/tiny/.sglang-model-complete").stdout.strip() == f"controller:{source}"
    (source / "model.safetensors").write_bytes(b"\1" * 4096)  # a changed source is not re-fetched under the same name
    again = provisioned.playbook("playbooks/provision.yml", extra_vars=settings)
    assert again.returncode == 0 and again.changed(box.name) == 0, again.output[-3000:]


def test_a_hugging_face_token_never_reaches_the_output(provisioned):
    secret = "hf_SECRET_token_that_must_not_leak"
    settings = {
        "sglang_model_source": "huggingface",
        "sglang_model_hf_repo": "moonshotai/Kimi-K2.6",
        "sglang_model_hf_token": secret,
        "sglang_model_dest": "/srv/models/from-hub",
    }
    run = provisioned.playbook("playbooks/provision.yml", "-vvv", extra_vars=settings)
    assert run.returncode != 0  # no hub here (and the stand-in venv has no hf CLI)
    assert secret not in run.output
    assert "censored" in run.output
    box = provisioned.box
    assert box.run("test", "-e", "/srv/models/from-hub/.sglang-model-complete", check=False).returncode == 1
    assert box.run("sudo", "test", "-e", "/root/.sglang-model-hf-token", check=False).returncode == 1


def test_model_files_from_another_host_are_pulled_once_over_ssh(provisioned, box):
    source = box.root / "data" / "models" / "tiny"
    source.mkdir(parents=True)
    (source / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (source / "model.safetensors").write_bytes(b"\0" * 4096)
    box.run("sudo", "sh", "-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync", timeout=300)
    # The trust between the two hosts is the user's to set up; here: a key of the GPU host's root.
    target = provisioned.box
    target.run("sudo", "sh", "-c", "test -e /root/.ssh/models || ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/models")
    key = target.run("sudo", "cat", "/root/.ssh/models.pub").stdout
    with open(box.root / "root" / ".ssh" / "authorized_keys", "a") as keys:
        keys.write(key)
    settings = {
        "sglang_model_source": "host",
        "sglang_model_source_host": "root@127.0.0.1",
        "sglang_model_source_path": "/data/models/tiny",
        "sglang_model_dest": "/srv/models/pulled",
        "sglang_model_source_ssh_options": f"-p {box.ssh_port} -i /root/.ssh/models",
    }
    first = provisioned.playbook("playbooks/provision.yml", extra_vars=settings)
    assert first.returncode == 0, first.output[-3000:]
    pulled = target.run("runuser", "-u", "sglang", "--", "cat", "/srv/models/pulled/config.json", user="root").stdout
    assert pulled.startswith('{"architectures"')
    assert target.run("stat", "-c", "%s", "/srv/models/pulled/model.safetensors").stdout.strip() == "4096"
    again = provisioned.playbook("playbooks/provision.yml", extra_vars=settings)
    assert again.returncode == 0 and again.changed(target.name) == 0, again.output[-3000:]
