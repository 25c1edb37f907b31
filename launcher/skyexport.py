"""A plan option as SkyPilot task files (``launcher.taskfile.to_skypilot``), as one download.

One instance type: the YAML file itself. A mixed-type option: a zip holding one file per type
(each with the note at its top) and ``README.txt`` saying why there are several.
"""

from __future__ import annotations

import io
import zipfile

from launcher import taskfile


def download(option: dict, plan_id: int) -> tuple[str, bytes, str]:
    """(file name, content, content type) of option ``option`` of plan ``plan_id``."""
    files = taskfile.to_skypilot(option)
    if len(files) == 1:
        [(name, text)] = files
        return f"plan-{plan_id}-{name}", text.encode(), "application/yaml"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files:
            archive.writestr(name, text)
        archive.writestr(
            "README.txt",
            f"Plan {plan_id}, option {option.get('rank', '?')} mixes {len(files)} instance types.\n"
            "SkyPilot launches one instance type per cluster, so each type has its own task file.\n"
            "Launch them as separate clusters only if your training code joins them (one torchrun\n"
            "rendezvous across clusters); otherwise launch this option with Srifty, which runs\n"
            "them as one cluster.\n",
        )
    return f"plan-{plan_id}-option-{option.get('rank', 1)}.sky.zip", buf.getvalue(), "application/zip"
