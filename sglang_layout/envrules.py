"""Which environment variables a declaration may give the server: a rule, not a short list (pure).

The declaration is data, never code. A variable is refused when it can make the server (or SGLang's own
verdict program, which runs with the same environment) load or run code from somewhere the venv did not
put it, or when the unit sets it itself:
  - the dynamic loader's variables (`LD_*`) and the others glibc strips for setuid programs (its
    "unsecure" list: GCONV_PATH, LOCPATH, NLSPATH, HOSTALIASES, GLIBC_TUNABLES, ...);
  - Python's `PYTHON*` variables, except a short list that only tunes the interpreter (PYTHONUNBUFFERED,
    PYTHONHASHSEED, ...): PYTHONPATH, PYTHONHOME, PYTHONSTARTUP, PYTHONUSERBASE, PYTHONPYCACHEPREFIX and
    PYTHONWARNINGS (its categories are imported) all load or redirect code;
  - search paths and paths of programs run or loaded (`PATH` and every name ending in `PATH`, e.g.
    CUDA_INJECTION64_PATH, TRITON_PTXAS_PATH);
  - plugins and injection (`*PLUGIN*`, `*INJECTION*`, `*_PRELOAD`): NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN, ...;
  - shells' start-up files and exported functions (BASH_ENV, ENV, BASH_FUNC_*);
  - what the unit sets itself (CUDA_VISIBLE_DEVICES, PATH, LD_LIBRARY_PATH, CUDA_HOME: sglang_layout.command),
    and what the host's install record sets (checked where the unit is rendered, sglang_layout.unit).
"""

from __future__ import annotations

# The unit's own environment (sglang_layout.command.service_environment), and where each comes from.
UNIT_ENV = {
    "CUDA_VISIBLE_DEVICES": "the project picks the GPUs from the layout's sizes and the instance's sglang_gpu_ids",
    "PATH": "the unit sets it: the CUDA toolkit's bin, then the venv's, then the system's",
    "LD_LIBRARY_PATH": "the unit sets it: the venv's CUDA 13 libraries, then the toolkit's",
    "CUDA_HOME": "the unit sets it from the cuda_toolkit role's install (cuda_toolkit_home)",
}
# glibc's UNSECURE_ENVVARS (sysdeps/generic/unsecvars.h), less the LD_ ones the prefix covers.
GLIBC_UNSECURE = frozenset(
    {
        "GCONV_PATH",
        "GETCONF_DIR",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "LOCPATH",
        "MALLOC_TRACE",
        "NIS_PATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "RES_OPTIONS",
        "TMPDIR",
        "TZDIR",
    }
)
# Python variables that tune the interpreter without loading or redirecting code.
PYTHON_TUNING = frozenset(
    {
        "PYTHONUNBUFFERED",
        "PYTHONHASHSEED",
        "PYTHONFAULTHANDLER",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONMALLOC",
        "PYTHONMALLOCSTATS",
        "PYTHONTRACEMALLOC",
        "PYTHONOPTIMIZE",
        "PYTHONDEVMODE",
        "PYTHONNOUSERSITE",
        "PYTHONVERBOSE",
        "PYTHONINTMAXSTRDIGITS",
        "PYTHONCOERCECLOCALE",
        "PYTHONWARNDEFAULTENCODING",
    }
)
SHELL_START = frozenset({"BASH_ENV", "ENV"})
FIX = "remove it: install what the server needs into the venv (the sglang_venv role), never load it from elsewhere"


def refusal(name: str) -> tuple[str, str] | None:
    """Why the declaration may not set variable `name`, and the fix; None when it may."""
    upper = name.upper()
    if name in UNIT_ENV:
        return UNIT_ENV[name], "remove it from env"
    if upper.startswith("LD_") or upper in GLIBC_UNSECURE:
        return f"{name} steers the dynamic loader (what it loads and from where)", FIX
    if upper.startswith("PYTHON") and upper not in PYTHON_TUNING:
        return f"{name} can make Python load or redirect code (only interpreter tuning such as PYTHONUNBUFFERED is allowed)", FIX
    if upper.endswith("PATH"):
        return f"{name} is a search path or the path of something the server runs or loads", FIX
    if "PLUGIN" in upper or "INJECTION" in upper or upper.endswith("_PRELOAD"):
        return f"{name} names a plugin or injection library the server would load", FIX
    if upper in SHELL_START or upper.startswith("BASH_FUNC_"):
        return f"{name} makes a shell run code at start", FIX
    return None
