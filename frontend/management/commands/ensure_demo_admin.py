"""Create a demo superuser when no superuser exists, and print how to log in.

The password is random, generated once and kept in DATA_DIR/demo_admin_password (mode 0600),
so a fresh install never has a guessable login.
"""

import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the demo admin if there is no superuser; print the login."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username: str, **opts):
        User = get_user_model()
        path = Path(settings.DATA_DIR) / "demo_admin_password"
        if not User.objects.filter(is_superuser=True).exists():
            password = secrets.token_urlsafe(12)
            User.objects.create_superuser(username=username, email="", password=password)
            path.write_text(password)
            path.chmod(0o600)
            self.stdout.write(self.style.SUCCESS(f"Created demo admin: {username} / {password}"))
        elif path.exists():
            self.stdout.write(f"Demo admin login: {username} / {path.read_text().strip()}")
        else:
            self.stdout.write("A superuser exists; log in with its credentials.")
