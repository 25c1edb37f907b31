from django import forms

from catalog.importer import max_file_bytes


def _capped(upload):
    """An uploaded CSV no larger than the import's cap (checked before anything reads it)."""
    if upload is not None and upload.size > max_file_bytes():
        raise forms.ValidationError(f"the file is {upload.size} bytes; at most {max_file_bytes()} bytes")
    return upload


class CatalogUploadForm(forms.Form):
    instances = forms.FileField(
        help_text="CSV with the snapshot's columns (InstanceType, AcceleratorName, ...)"
    )
    network = forms.FileField(
        required=False, help_text="Optional network CSV (aws_instance_network.csv columns)"
    )
    observed_at = forms.DateTimeField(
        required=False, help_text="When the prices were observed (default: now)"
    )

    def clean_instances(self):
        return _capped(self.cleaned_data.get("instances"))

    def clean_network(self):
        return _capped(self.cleaned_data.get("network"))
