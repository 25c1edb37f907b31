// Profiling form: shows only the fields of the chosen kind (compute / comm) and place (local / EC2).
// A hidden field is also disabled, so it is not sent (the server fills in its default and still
// validates everything). Without JavaScript every field is shown and sent, as before.
(function () {
  "use strict";
  const form = document.getElementById("profile-form");
  if (!form) return;
  const kind = form.querySelector("select[name=kind]");
  const place = form.querySelector("select[name=provider]");
  const section = form.closest("section") || document;
  const note = document.getElementById("form-fields-note");

  function applies(el) {
    const k = el.dataset.kind, p = el.dataset.place;
    return (!k || k === kind.value) && (!p || p === place.value);
  }
  function update() {
    section.querySelectorAll("[data-kind], [data-place]").forEach((el) => {
      // a field the server marked wrong stays visible, whatever is chosen: its message must be read
      const show = applies(el) || el.querySelector(".error") !== null;
      el.style.display = show ? "" : "none";  // the stylesheet's `label { display: grid }` beats [hidden]
      el.querySelectorAll("input, select, textarea").forEach((input) => { input.disabled = !show; });
    });
  }
  kind.addEventListener("change", update);
  place.addEventListener("change", update);
  if (note) note.hidden = false;
  update();
})();
