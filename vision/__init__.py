"""vision: image classification by transfer learning over any timm backbone."""
