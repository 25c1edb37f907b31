// Forms that launch something (the launch page, a re-plan's apply; marked data-submit-once) are
// sent once: a double click or a second Enter sends nothing more, and the buttons stay disabled
// while the next page loads. The server refuses a reused confirmation anyway.
(function () {
  "use strict";
  const forms = document.querySelectorAll("form[data-submit-once]");
  const buttons = (form) => form.querySelectorAll("button[type=submit]");
  for (const form of forms) {
    form.addEventListener("submit", (event) => {
      if (form.dataset.sent) { event.preventDefault(); return; }
      form.dataset.sent = "1";
      // After this event: a submitter disabled during it would leave its name out of the form.
      setTimeout(() => buttons(form).forEach((b) => { b.disabled = true; }));
    });
  }
  // Back on this page from the history cache: the buttons work again (a used confirmation is
  // answered with the job it launched).
  window.addEventListener("pageshow", (event) => {
    if (!event.persisted) return;
    for (const form of forms) {
      delete form.dataset.sent;
      buttons(form).forEach((b) => { b.disabled = false; });
    }
  });
})();
