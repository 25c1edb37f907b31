"""Existing DRF tokens (``authtoken_token``, stored in clear) become hashed ``ApiToken`` rows.

Each key is stored as its SHA-256 with ``API_TOKEN_TTL_DAYS`` from now, so the scripts that use
it keep working until then; the clear rows are deleted. ``rest_framework.authtoken`` is no longer
installed, so its table is read with plain SQL, and only where an older install created it. The
table itself is left (empty): its migrations stay recorded as applied. Not reversible: a hash
does not give the key back.
"""

import hashlib
from datetime import UTC, timedelta

from django.conf import settings
from django.db import migrations
from django.utils import timezone

CLEAR_TABLE = "authtoken_token"


def _aware(created):
    # SQLite hands back the naive UTC time Django stored; PostgreSQL an aware one.
    return created.replace(tzinfo=UTC) if timezone.is_naive(created) else created


def hash_clear_tokens(apps, schema_editor):
    connection = schema_editor.connection
    if CLEAR_TABLE not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("accounts", "ApiToken")
    table = connection.ops.quote_name(CLEAR_TABLE)
    expires_at = timezone.now() + timedelta(days=settings.API_TOKEN_TTL_DAYS)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {connection.ops.quote_name('key')}, user_id, created FROM {table}")
        rows = [(key, user_id, _aware(created)) for key, user_id, created in cursor.fetchall()]
        ApiToken.objects.bulk_create(
            ApiToken(
                user_id=user_id,
                token_hash=hashlib.sha256(key.encode()).hexdigest(),
                token_expires_at=expires_at,
                created_at=created,
            )
            for key, user_id, created in rows
        )
        cursor.execute(f"DELETE FROM {table}")


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]

    operations = [migrations.RunPython(hash_clear_tokens, migrations.RunPython.noop)]
