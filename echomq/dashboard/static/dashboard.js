// Live parts: an element with data-refresh="URL" is reloaded from URL every data-every ms
// (the server renders the HTML). Actions: a form with data-confirm asks before it posts.
(function () {
  function refresh(element) {
    fetch(element.dataset.refresh, { credentials: "same-origin" })
      .then((response) => (response.ok ? response.text() : Promise.reject(response.status)))
      .then((html) => { element.innerHTML = html; element.classList.remove("stale"); })
      .catch(() => element.classList.add("stale"));
  }
  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-refresh]").forEach((element) => {
      setInterval(() => refresh(element), Number(element.dataset.every || 2000));
    });
  });
  // delegated: a form inside a live part (a group's Pause) is new after every refresh
  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });
})();
