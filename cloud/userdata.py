"""The time-limit guard every launch puts into its user-data, and EC2's user-data size limit.

``with_time_limit`` makes ``shutdown -h +N`` the VM's first command; instances are launched with
``InstanceInitiatedShutdownBehavior=terminate`` (``cloud.ec2``), so the VM terminates itself at
the hard time limit even if Srifty is gone. The scripts themselves are built by
``fleet.boot``.
"""

from __future__ import annotations

import re
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

__all__ = ["MAX_USER_DATA_BYTES", "check_size", "shutdown_guard", "with_time_limit"]

MAX_USER_DATA_BYTES = 16 * 1024  # EC2's limit on raw (not base64) user-data

_GUARD_RE = re.compile(r"^shutdown -h \+\d+\b")
_SHELL_SHEBANG_RE = re.compile(r"^#!\s*(/usr)?/bin/(env\s+)?(ba|da|k|z)?sh(\s|$)")
# cloud-init part types for the first line of non-shell user-data (see ``with_time_limit``).
_PART_TYPES = (
    ("#cloud-config", "cloud-config"),
    ("#cloud-boothook", "cloud-boothook"),
    ("#include", "x-include-url"),
    ("#!", "x-shellscript"),
)


def shutdown_guard(max_minutes: int) -> str:
    """The line that powers the VM off after ``max_minutes`` (terminating it, see module doc)."""
    if isinstance(max_minutes, bool) or not isinstance(max_minutes, int) or max_minutes < 1:
        raise ValueError(f"max_minutes must be an int >= 1, not {max_minutes!r}")
    return f"shutdown -h +{max_minutes}"


def with_time_limit(user_data: str, max_minutes: int) -> str:
    """``user_data`` with the ``shutdown -h +N`` guard as its first command.

    A shell script (``#!/bin/bash``, ``#!/bin/sh``, ``#!/usr/bin/env bash``, ...) gets the guard
    inserted right after its shebang, unless the guard is already there (as in the scripts built
    by ``fleet.boot``); empty user-data becomes a script with only the guard; anything else
    (``#cloud-config``, a Python script, ...) is wrapped in a MIME multipart message next to a
    one-line guard script, and cloud-init runs both parts.
    """
    guard = shutdown_guard(max_minutes)
    if not user_data.strip():
        return f"#!/bin/bash\n{guard}\n"
    first, _, rest = user_data.partition("\n")
    if _SHELL_SHEBANG_RE.match(first):
        if _GUARD_RE.match(rest.lstrip("\n").split("\n", 1)[0]):
            return user_data
        return f"{first}\n{guard}\n{rest}"
    message = MIMEMultipart()
    message.attach(MIMEText(f"#!/bin/bash\n{guard}\n", "x-shellscript"))
    subtype = next((sub for prefix, sub in _PART_TYPES if first.startswith(prefix)), "plain")
    message.attach(MIMEText(user_data, subtype))
    return message.as_string()


def check_size(user_data: str) -> str:
    size = len(user_data.encode())
    if size > MAX_USER_DATA_BYTES:
        raise ValueError(f"user-data is {size} bytes; EC2 accepts at most {MAX_USER_DATA_BYTES}")
    return user_data
