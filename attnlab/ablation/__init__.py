"""The ablation lab: the papers' ablation tables re-run as configurations of the library's recipes, with
probes that separate small models and their noise measured over seeds (``attnlab ablate``).

- `table`: `Table`, `Row`, `RunConfig`, `Probe`: a table as data, its expected orderings;
- `tables`: the tables, one data module per paper;
- `settings`: seeds, device and the sizes and standard budgets the lab trains at;
- `runs`: `RunSpec` keyed by configuration and seed, `RunStore`: cached, resumable run folders;
- `plan`: a table's runs and their budgets; `execute`: each kind of run; `probes`: frozen-feature probes;
- `stats`: mean, spread, Welch's standard error, orderings (agrees / disagrees / not separated);
- `lab`: `run_table`; `report`: TABLE.md, TABLE.json, TABLE.png and the summary page.
"""
