from django import forms


class CatalogUploadForm(forms.Form):
    instances = forms.FileField(help_text="CSV with the snapshot's columns (InstanceType, AcceleratorName, ...)")
    network = forms.FileField(required=False, help_text="Optional network CSV (aws_instance_network.csv columns)")
    observed_at = forms.DateTimeField(required=False, help_text="When the prices were observed (default: now)")
