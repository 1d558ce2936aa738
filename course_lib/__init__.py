"""Reference implementations and course infrastructure for the LLM inference systems workbook.

One module per concept (see shared/DESIGN.md): ``tokenizer``, ``model``, ``attention``,
``kv_cache``, ``paged``, ``sampling``, ``scheduler``, ``engine``, ``metrics``; plus the course
machinery: ``checks`` (what notebook test cells call), ``grading`` and ``cli`` (the ``course`` command).
"""

__version__ = "0.1.0"
