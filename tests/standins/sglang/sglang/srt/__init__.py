"""STAND-IN for sglang.srt (rehearsal tests only): the argument entry points of SGLang's launcher."""
