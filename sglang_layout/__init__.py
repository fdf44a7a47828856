"""The layout logic: SGLang's parallel rules, the memory-fit estimate, the flag table and the rendered command.

Plain Python with no Ansible import; the Ansible plugins and the CLI are thin adapters over it.
"""
