// Reloads the page every data-refresh seconds while it is visible and no
// form on it is being filled in. The console works without this script.
(function () {
  var s = document.body && document.body.getAttribute("data-refresh");
  var secs = parseInt(s, 10);
  if (!secs || secs < 1) return;
  if (document.querySelector("form[method=post]")) return; // a confirmation page
  var typing = false;
  document.addEventListener("input", function () { typing = true; });
  setInterval(function () {
    if (document.hidden || typing) return;
    location.reload();
  }, secs * 1000);
})();
