"""The layout search: candidates (layouts x a flag grid), preflighted on the controller, each launched once
through deploy.yml, measured level by level until the knee, recorded in a resumable manifest, reported."""
